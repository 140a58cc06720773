"""List the stores of an app and each task's local copy of them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.errors import StoreCorruptError
from statekeeper.ops.live_task import read_only_store
from statekeeper.processing.topology import task_id
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.directory import TaskDirectory
from statekeeper.state.task_id import TaskId
from statekeeper.stores.builders import StoreSpec


@dataclass(frozen=True)
class LocalStore:
    """One task's copy of one store on this machine.

    ``approx_entries`` is RocksDB's ``estimate-num-keys``: it counts overwrites and deletes
    not yet compacted away, so it can exceed the real key count (for window stores it also
    counts one bookkeeping entry); a custom store's is what its engine reports. None when
    the store has no local files (in-memory and LRU stores live only in the running app; a
    task never run here has none) or a custom engine cannot be read from outside.
    ``engine``: "rocksdb", or a custom store's engine (docs/custom-stores.md).
    """

    store: str
    kind: str
    task: str
    path: str
    on_disk: bool
    approx_entries: int | None
    bytes_on_disk: int
    engine: str = "rocksdb"


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
                    approx_entries=_estimate_keys(path, spec) if on_disk else None,
                    bytes_on_disk=_size(path) if on_disk else 0,
                    engine=spec.engine,
                )
            )
    return found


def _task_dirs(app_dir: Path, subtopology: int) -> list[str]:
    """Names of the subtopology's task directories, in partition order."""
    partitions = []
    for path in app_dir.glob("*"):
        tid = TaskId.try_parse(path.name)
        if tid is not None and tid.subtopology == subtopology and path.is_dir():
            partitions.append(tid.partition)
    return [task_id(subtopology, p) for p in sorted(partitions)]


def _estimate_keys(path: Path, spec: StoreSpec) -> int | None:
    try:
        with read_only_store(path, spec.name, spec) as store:
            return store.approximate_num_entries()
    except StoreCorruptError:
        if spec.supplier is None:
            raise
        return None  # a custom engine without a read-only view, or a copy that would not settle


def _size(path: Path) -> int:
    total = 0
    for f in path.rglob("*"):
        try:
            if f.is_file():
                total += f.stat().st_size
        except FileNotFoundError:  # a running app's compaction removed it while we walked
            continue
    return total
