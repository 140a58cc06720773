"""List the stores of an app and each task's local copy of them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rocksdict

from statekeeper.errors import StoreCorruptError
from statekeeper.processing.topology import task_id
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.directory import TaskDirectory
from statekeeper.stores.builders import StoreSpec


@dataclass(frozen=True)
class LocalStore:
    """One task's copy of one store on this machine.

    ``approx_entries`` is RocksDB's ``estimate-num-keys``: it counts overwrites and deletes
    not yet compacted away, so it can exceed the real key count (for window stores it also
    counts one bookkeeping entry). None when the store has no local files (in-memory and
    LRU stores live only in the running app; a task never run here has none).
    """

    store: str
    kind: str
    task: str
    path: str
    on_disk: bool
    approx_entries: int | None
    bytes_on_disk: int


def store_specs(topology: Any) -> dict[str, tuple[int, StoreSpec]]:
    """``{store name: (subtopology id, spec)}`` of every store, internal ones included."""
    return {
        spec.name: (sub.id, spec)
        for sub in topology.subtopologies
        for spec in topology.store_specs(sub.id)
    }


def list_local_stores(settings: StatekeeperSettings, topology: Any) -> list[LocalStore]:
    """Every store of ``topology`` for every task directory found under the app's state dir."""
    app_dir = Path(settings.state_dir) / settings.application_id
    found = []
    for name, (sub, spec) in sorted(store_specs(topology).items()):
        for task in _task_dirs(app_dir, sub):
            path = TaskDirectory(settings.state_dir, settings.application_id, task).store_path(name)
            on_disk = spec.persistent and path.is_dir()
            found.append(
                LocalStore(
                    store=name,
                    kind=spec.kind,
                    task=task,
                    path=str(path),
                    on_disk=on_disk,
                    approx_entries=_estimate_keys(path) if on_disk else None,
                    bytes_on_disk=_size(path) if on_disk else 0,
                )
            )
    return found


def _task_dirs(app_dir: Path, subtopology: int) -> list[str]:
    """Names of the subtopology's task directories, in partition order."""
    partitions = []
    for path in app_dir.glob(task_id(subtopology, 0).removesuffix("0") + "*"):
        partition = path.name.rsplit("_", 1)[1]
        if path.is_dir() and partition.isdigit():
            partitions.append(int(partition))
    return [task_id(subtopology, p) for p in sorted(partitions)]


def open_read_only(path: Path) -> rocksdict.Rdict:
    """A read-only handle on a task store's RocksDB (takes no lock, writes nothing)."""
    try:
        return rocksdict.Rdict(
            str(path),
            rocksdict.Options(raw_mode=True),
            access_type=rocksdict.AccessType.read_only(),
        )
    except Exception as exc:  # rocksdict raises plain Exception for I/O and corruption
        raise StoreCorruptError(f"cannot open the store at {path} read-only: {exc}") from exc


def _estimate_keys(path: Path) -> int:
    db = open_read_only(path)
    try:
        return int(db.property_int_value("rocksdb.estimate-num-keys") or 0)
    finally:
        db.close()


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
