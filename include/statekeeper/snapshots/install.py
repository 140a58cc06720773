"""Install a verified snapshot of one store into its task directory (or wipe it for a replay).

The shared step of every snapshot restore: ``statekeeper restore`` (a stopped app), a drill
(into a sandbox) and a running app's worker when a task's local state is missing
(invariant 4). Candidates are tried newest first: every file is downloaded into a temporary
directory next to the store while its SHA-256 and size are checked, and only a fully
verified copy replaces the store directory. A snapshot that fails (an unreadable manifest,
a missing or damaged file, another app's or another partition's changelog) is skipped for
the previous one, each fallback reported with its reason; with none left the store is wiped
for a full replay. Empty files are written, not downloaded (see
:mod:`statekeeper.snapshots.manifest`). The running app's installer (:func:`installer_for`)
also falls back to a full replay when the snapshot storage itself fails, saying so: a
restore never stops a task from opening.

A RocksDB checkpoint carries the store's metadata (the commit marker's changelog offset,
source offsets, batch id) in the same write as the data (invariant 3), so opening the task
afterwards replays only the changelog tail after the snapshot's marker.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.changelog.records import changelog_topic
from statekeeper.settings import StatekeeperSettings
from statekeeper.snapshots.catalog import UnreadableManifest, read_catalog
from statekeeper.snapshots.manifest import Manifest, SnapshotError
from statekeeper.snapshots.staging import (
    KV_DUMP_FILE,
    KV_DUMP_METADATA_FILE,
    LAYOUT_KV_DUMP,
    LAYOUT_ROCKSDB,
    read_kv_dump,
)
from statekeeper.snapshots.storage import SnapshotStorage
from statekeeper.state.directory import TaskDirectory
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import StoreSpec

LATEST = "latest"
NONE = "none"
_CHUNK = 1 << 20

#: Download progress: ``(task, store, bytes done, bytes total of the snapshot)``.
Progress = Callable[[str, str, int, int], None]


class RestoreError(SnapshotError):
    """A restore cannot start or finish; the message names the task, store or snapshot."""


@dataclass
class StoreRestore:
    """How one store got its state back."""

    task: str
    store: str
    source: str  # "snapshot", "full replay" or "changelog (in-memory store)"
    snapshot_id: str | None = None
    records_replayed: int = 0
    bytes_downloaded: int = 0
    seconds: float = 0.0
    marker_offset: int | None = None
    batch_id: int | None = None
    fallbacks: list[dict[str, str]] = field(default_factory=list)  # snapshot_id, reason
    note: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Rejected(Exception):
    """A snapshot candidate that cannot be installed; the message is the reason."""


def _candidates(
    storage: SnapshotStorage, task: str, store: str, from_snapshot: str
) -> list[Manifest | UnreadableManifest]:
    """Snapshots to try, best first: all (``latest``) or the named one and those before it.
    Unreadable manifests stand where their ids sort, so a fallback past one is reported."""
    catalog = read_catalog(storage, task, store)
    found: list[Manifest | UnreadableManifest] = list(catalog.manifests[::-1])
    for bad in sorted(catalog.unreadable, key=lambda u: u.snapshot_id):
        # Snapshot ids begin with their creation time: an unreadable one goes before the
        # first (newest first) snapshot whose id is older.
        at = next((i for i, m in enumerate(found) if m.snapshot_id < bad.snapshot_id), len(found))
        found.insert(at, bad)
    if from_snapshot == LATEST:
        return found
    ids = [m.snapshot_id for m in found]
    if from_snapshot not in ids:
        raise RestoreError(
            f"no snapshot {from_snapshot!r} of task {task} store {store} of app "
            f"{storage.app!r} in {storage.url} (see `statekeeper snapshot list`)"
        )
    named = found[ids.index(from_snapshot)]
    if isinstance(named, UnreadableManifest):
        raise RestoreError(f"snapshot {from_snapshot!r} is unreadable: {named.reason}")
    return found[ids.index(from_snapshot) :]


def _download(
    storage: SnapshotStorage,
    manifest: Manifest,
    target: Path,
    report: StoreRestore,
    progress: Progress | None,
) -> None:
    """Fetch every file of ``manifest`` into ``target``, checking size and SHA-256 and
    counting the bytes read into ``report``; raises :class:`_Rejected` naming the first bad
    file."""
    target.mkdir(parents=True)
    done = 0
    for entry in manifest.files:
        if not entry.stored:  # an empty file: nothing to download
            (target / entry.name).touch()
            continue
        digest, size = hashlib.sha256(), 0
        try:
            with storage.open_shared(entry.sha256) as src, open(target / entry.name, "wb") as dst:
                while chunk := src.read(_CHUNK):
                    digest.update(chunk)
                    dst.write(chunk)
                    size += len(chunk)
                    report.bytes_downloaded += len(chunk)
                    if progress is not None:
                        progress(manifest.task, manifest.store, done + size, manifest.total_bytes)
        except FileNotFoundError as exc:
            raise _Rejected(f"file {entry.name} ({entry.sha256}) is missing") from exc
        done += size
        if size != entry.size or digest.hexdigest() != entry.sha256:
            raise _Rejected(
                f"file {entry.name} failed verification (sha256 {digest.hexdigest()[:12]}… "
                f"size {size}, expected {entry.sha256[:12]}… size {entry.size})"
            )


def _check_belongs(manifest: Manifest, app: str, partition: int, spec: StoreSpec | None) -> None:
    if manifest.app != app:
        raise RestoreError(f"snapshot {manifest.snapshot_id} belongs to app {manifest.app!r}")
    custom = spec is not None and spec.supplier is not None
    if custom and manifest.layout != LAYOUT_KV_DUMP:
        raise _Rejected(
            f"layout {manifest.layout!r} is not a kv-dump, the layout of custom store "
            f"{manifest.store!r}'s snapshots"
        )
    if not custom and manifest.layout != LAYOUT_ROCKSDB:
        raise _Rejected(f"layout {manifest.layout!r} is not a RocksDB checkpoint")
    expected = changelog_topic(app, manifest.store)
    if manifest.changelog_topic not in (None, expected):
        raise _Rejected(f"its changelog is {manifest.changelog_topic!r}, not {expected!r}")
    if manifest.changelog_partition != partition:
        raise _Rejected(
            f"its changelog partition is {manifest.changelog_partition}, not {partition}"
        )


def install_store(
    settings: StatekeeperSettings,
    storage: SnapshotStorage | None,
    task_id: str,
    partition: int,
    store: str,
    from_snapshot: str = LATEST,
    progress: Progress | None = None,
    *,
    spec: StoreSpec | None = None,
) -> StoreRestore:
    """Put the best verified snapshot of ``store`` into place (or wipe it for a full replay).

    ``spec``: the store's spec; a custom store's (``spec.supplier``) snapshots are kv-dumps,
    built into a fresh store of its supplier here (:func:`_build_from_dump`).

    The task must be locked by the caller or stopped; the tail is replayed when the task is
    opened next (:func:`restore_task`)."""
    report = StoreRestore(task_id, store, source="full replay")
    started = time.perf_counter()
    path = TaskDirectory(settings.state_dir, settings.application_id, task_id).store_path(store)
    if path.parent.is_dir():
        # Downloads of an earlier restore that died before moving them into place.
        for leftover in path.parent.glob(f".restore-{store}-*"):
            shutil.rmtree(leftover, ignore_errors=True)
    candidates: list[Manifest | UnreadableManifest] = []
    if from_snapshot == NONE or storage is None:
        report.note = "full changelog replay requested"
    else:
        candidates = _candidates(storage, task_id, store, from_snapshot)
        if not candidates:
            report.note = f"no snapshot of task {task_id} store {store}"
    for manifest in candidates:
        if isinstance(manifest, UnreadableManifest):
            report.fallbacks.append(
                {
                    "snapshot_id": manifest.snapshot_id,
                    "reason": f"unreadable manifest ({manifest.kind}): {manifest.reason}",
                }
            )
            continue
        temp = path.parent / f".restore-{store}-{uuid.uuid4().hex}"
        try:
            _check_belongs(manifest, settings.application_id, partition, spec)
            _download(storage, manifest, temp, report, progress)  # type: ignore[arg-type]
            if manifest.layout == LAYOUT_KV_DUMP:
                assert spec is not None and spec.supplier is not None
                temp = _build_from_dump(spec, temp)
        except _Rejected as exc:
            report.fallbacks.append({"snapshot_id": manifest.snapshot_id, "reason": str(exc)})
            shutil.rmtree(temp, ignore_errors=True)
            continue
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        # Verified: only now does the old store go.
        shutil.rmtree(path, ignore_errors=True)
        os.replace(temp, path)
        report.source, report.snapshot_id = "snapshot", manifest.snapshot_id
        report.note = None
        break
    else:
        if report.fallbacks:
            report.note = "no snapshot verified; full changelog replay"
        shutil.rmtree(path, ignore_errors=True)
    report.seconds = time.perf_counter() - started
    return report


#: Entries per restore_batch when a kv-dump is built into a custom store.
_DUMP_BATCH = 10_000


def _build_from_dump(spec: StoreSpec, dump: Path) -> Path:
    """A store of ``spec``'s supplier built beside ``dump`` from its entries and metadata
    (one ``restore_batch`` per :data:`_DUMP_BATCH` entries, the metadata with the last);
    ``dump`` is removed. Raises :class:`_Rejected` when the dump cannot be read."""
    assert spec.supplier is not None
    built = dump.with_name(dump.name + "-built")
    try:
        try:
            metadata = StoreMetadata.from_json((dump / KV_DUMP_METADATA_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise _Rejected(f"its {KV_DUMP_METADATA_FILE} is unreadable: {exc}") from exc
        store = spec.supplier.get(spec.name, built)
        try:
            batch: list[tuple[bytes, bytes | None]] = []
            try:
                for entry in read_kv_dump(dump / KV_DUMP_FILE):
                    batch.append(entry)
                    if len(batch) >= _DUMP_BATCH:
                        store.restore_batch(batch, None)
                        batch = []
            except SnapshotError as exc:
                raise _Rejected(str(exc)) from exc
            store.restore_batch(batch, metadata)
        finally:
            store.close()
    except BaseException:
        shutil.rmtree(built, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(dump, ignore_errors=True)
    return built


def installer_for(
    settings: StatekeeperSettings,
    storage: SnapshotStorage | Callable[[], SnapshotStorage],
    task_id: str,
    partition: int,
    progress: Progress | None = None,
    *,
    replay_on_storage_error: bool = False,
) -> Callable[[Any, Path], StoreRestore]:
    """A :data:`statekeeper.state.task_state_manager.StoreInstaller` for one task: the newest
    verified snapshot of a store whose local copy is missing (the caller holds the lock).

    ``storage`` may be a function returning it (opened at the first install).
    ``replay_on_storage_error`` (the running app): a storage that cannot be opened, listed or
    read leaves the store to a full changelog replay, the error in the report's note,
    instead of failing the task's open."""

    def install(spec: Any, path: Path) -> StoreRestore:
        expected = TaskDirectory(settings.state_dir, settings.application_id, task_id)
        if expected.store_path(spec.name) != path:
            raise RestoreError(f"store {spec.name} of task {task_id} is not at {path}")
        try:
            opened = storage if isinstance(storage, SnapshotStorage) else storage()
            return install_store(
                settings, opened, task_id, partition, spec.name, LATEST, progress, spec=spec
            )
        except Exception as exc:
            if not replay_on_storage_error:
                raise
            shutil.rmtree(path, ignore_errors=True)  # whatever a failed install left
            return StoreRestore(
                task_id,
                spec.name,
                source="full replay",
                note=f"snapshot storage failed ({type(exc).__name__}: {exc}); full changelog "
                "replay",
            )

    return install


def describe_install(report: StoreRestore) -> str:
    """One line for restore listeners and logs: where the store's state comes from and
    which snapshots were skipped, with their reasons."""
    if report.source == "snapshot":
        text = f"installed snapshot {report.snapshot_id}; replaying the changelog tail"
    else:
        note = report.note or "no snapshot installed"
        text = note if "full changelog replay" in note else f"{note}; full changelog replay"
    if report.fallbacks:
        skipped = "; ".join(f"{f['snapshot_id']}: {f['reason']}" for f in report.fallbacks)
        text += f" (skipped {len(report.fallbacks)}: {skipped})"
    return text
