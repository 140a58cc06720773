"""Restore a stopped app's stores from a snapshot plus the changelog tail (``statekeeper restore``).

For each selected task and RocksDB store: pick a snapshot (``latest`` = the newest that
verifies, an explicit snapshot id, or ``none`` = full changelog replay), download every
file into a temporary directory next to the store while checking its SHA-256 and size,
and only then replace the store directory with it. A snapshot that fails (a missing or
damaged file, another app's or another partition's changelog) is skipped for the previous
one, and with none left the store is wiped for a full replay; each fallback is reported
with its reason.

A RocksDB checkpoint carries the store's metadata (the commit marker's changelog offset,
source offsets, batch id) written in the same write as the data (invariant 3), so opening
the task afterwards through the :class:`StateEnvironment` replays only the changelog tail
after the snapshot's marker and leaves the task at its last commit. In-memory and LRU
stores are not installed: they always restore fully from their changelog on open.

The app must be stopped: a task whose lock another process holds is refused, naming it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.changelog.records import changelog_topic
from statekeeper.errors import TaskLockedError
from statekeeper.ops.snapshots.catalog import list_snapshots
from statekeeper.ops.snapshots.manifest import Manifest, SnapshotError
from statekeeper.ops.snapshots.staging import LAYOUT_ROCKSDB
from statekeeper.ops.snapshots.storage import SnapshotStorage
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.directory import TaskDirectory, TaskLock
from statekeeper.state.environment import StateEnvironment

LATEST = "latest"
NONE = "none"
_CHUNK = 1 << 20
_TASK_ID = re.compile(r"^(\d+)_(\d+)$")

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


def parse_task_id(task_id: str) -> tuple[int, int]:
    """``(subtopology, partition)`` of a task id ``<sub>_<partition>``."""
    match = _TASK_ID.match(task_id)
    if not match:
        raise RestoreError(f"task id {task_id!r} is not <subtopology>_<partition>")
    return int(match[1]), int(match[2])


def ensure_stopped(settings: StatekeeperSettings, task_id: str) -> None:
    """Refuse a task whose lock another process holds (the app is running)."""
    directory = TaskDirectory(settings.state_dir, settings.application_id, task_id)
    if TaskLock(directory, 0).held_elsewhere():
        try:
            holder = directory.lock_file.read_text().strip() or "unknown"
        except OSError:
            holder = "unknown"
        raise TaskLockedError(
            f"task {task_id} of {settings.application_id} is locked by PID {holder} "
            f"({directory.lock_file}): the app is running; stop it before restoring"
        )


def _candidates(
    storage: SnapshotStorage, task: str, store: str, from_snapshot: str
) -> list[Manifest]:
    """Snapshots to try, best first: all (``latest``) or the named one and those before it."""
    found = list_snapshots(storage, task, store)[::-1]
    if from_snapshot == LATEST:
        return found
    ids = [m.snapshot_id for m in found]
    if from_snapshot not in ids:
        raise RestoreError(
            f"no snapshot {from_snapshot!r} of task {task} store {store} of app "
            f"{storage.app!r} in {storage.url} (see `statekeeper snapshot list`)"
        )
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


def _check_belongs(manifest: Manifest, app: str, partition: int) -> None:
    if manifest.app != app:
        raise RestoreError(f"snapshot {manifest.snapshot_id} belongs to app {manifest.app!r}")
    if manifest.layout != LAYOUT_ROCKSDB:
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
) -> StoreRestore:
    """Put the best verified snapshot of ``store`` into place (or wipe it for a full replay).

    The task must be locked by the caller or stopped; the tail is replayed when the task is
    opened next (:func:`restore_task`)."""
    report = StoreRestore(task_id, store, source="full replay")
    started = time.perf_counter()
    path = TaskDirectory(settings.state_dir, settings.application_id, task_id).store_path(store)
    if path.parent.is_dir():
        # Downloads of an earlier restore that died before moving them into place.
        for leftover in path.parent.glob(f".restore-{store}-*"):
            shutil.rmtree(leftover, ignore_errors=True)
    candidates: list[Manifest] = []
    if from_snapshot == NONE or storage is None:
        report.note = "full changelog replay requested"
    else:
        candidates = _candidates(storage, task_id, store, from_snapshot)
        if not candidates:
            report.note = f"no snapshot of task {task_id} store {store}"
    for manifest in candidates:
        temp = path.parent / f".restore-{store}-{uuid.uuid4().hex}"
        try:
            _check_belongs(manifest, settings.application_id, partition)
            _download(storage, manifest, temp, report, progress)  # type: ignore[arg-type]
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


def restore_task(
    env: StateEnvironment,
    storage: SnapshotStorage | None,
    task_id: str,
    specs: list[Any],
    *,
    stores: list[str] | None = None,
    from_snapshot: str = LATEST,
    progress: Progress | None = None,
) -> list[StoreRestore]:
    """Install snapshots of the task's selected stores, then open and close the task once
    so the changelog tail is replayed and committed; one report per selected store."""
    settings = env.settings
    _, partition = parse_task_id(task_id)
    ensure_stopped(settings, task_id)
    names = {s.name for s in specs}
    unknown = sorted(set(stores or []) - names)
    if unknown:
        raise RestoreError(f"task {task_id} has no store {unknown}; stores: {sorted(names)}")
    selected = [s for s in specs if stores is None or s.name in stores]
    reports: dict[str, StoreRestore] = {}
    directory = TaskDirectory(settings.state_dir, settings.application_id, task_id)
    # Hold the lock while files move so a starting app cannot open half-installed state.
    with TaskLock(directory, 0):
        for spec in selected:
            if not spec.logging_enabled:
                reports[spec.name] = StoreRestore(
                    task_id, spec.name, "none", note="logging disabled: nothing to restore"
                )
            elif not spec.persistent:
                reports[spec.name] = StoreRestore(
                    task_id,
                    spec.name,
                    "changelog (in-memory store)",
                    note="in-memory/LRU stores always restore fully from their changelog",
                )
            else:
                reports[spec.name] = install_store(
                    settings, storage, task_id, partition, spec.name, from_snapshot, progress
                )
    task = env.task(task_id, partition, specs)
    outcomes = task.open()
    task.close()
    for outcome in outcomes:
        report = reports.get(outcome.job.store.name)
        if report is None:
            continue
        report.records_replayed = outcome.restored_records
        report.seconds += outcome.seconds
        report.marker_offset = outcome.marker_offset
        report.batch_id = None if outcome.last_marker is None else outcome.last_marker.batch_id
        if report.source == "snapshot" and outcome.full:
            # The restorer found the snapshot's marker inconsistent with the changelog.
            report.fallbacks.append(
                {"snapshot_id": report.snapshot_id or "", "reason": outcome.job.reason or "?"}
            )
            report.source, report.snapshot_id = "full replay", None
    return list(reports.values())


def restore_tasks(topology: Any, settings: StatekeeperSettings, storage: Any) -> list[str]:
    """Tasks to restore: stateful tasks with a local directory or with a snapshot."""
    stateful = {sub.id for sub in topology.subtopologies if topology.store_specs(sub.id)}
    found: set[str] = set()
    app_dir = Path(settings.state_dir) / settings.application_id
    if app_dir.is_dir():
        found |= {p.name for p in app_dir.iterdir() if p.is_dir() and _TASK_ID.match(p.name)}
    if storage is not None:
        found |= {m.task for m in list_snapshots(storage)}
    return sorted((t for t in found if parse_task_id(t)[0] in stateful), key=parse_task_id)


def restore_app(
    settings: StatekeeperSettings,
    topology: Any,
    storage: SnapshotStorage | None,
    *,
    tasks: list[str] | None = None,
    stores: list[str] | None = None,
    from_snapshot: str = LATEST,
    progress: Progress | None = None,
) -> list[StoreRestore]:
    """Restore the selected tasks (default: every task with local state or a snapshot;
    with a snapshot id, that snapshot's task and store)."""
    if from_snapshot not in (LATEST, NONE):
        if storage is None:
            raise RestoreError(f"snapshot {from_snapshot!r} needs a snapshot storage")
        named = [m for m in list_snapshots(storage) if m.snapshot_id == from_snapshot]
        if not named:
            raise RestoreError(
                f"no snapshot {from_snapshot!r} of app {settings.application_id!r} in "
                f"{storage.url} (see `statekeeper snapshot list`)"
            )
        tasks, stores = tasks or [named[0].task], stores or [named[0].store]
    selected = tasks or restore_tasks(topology, settings, storage)
    if not selected:
        raise RestoreError(
            f"app {settings.application_id!r} has no local task and no snapshot to restore"
        )
    # Refuse before touching anything when any task is held by a running app.
    for task_id in selected:
        parse_task_id(task_id)
        ensure_stopped(settings, task_id)
    env = StateEnvironment(settings)
    reports: list[StoreRestore] = []
    try:
        for task_id in selected:
            specs = topology.store_specs(parse_task_id(task_id)[0])
            if not specs:
                raise RestoreError(f"task {task_id} has no stores")
            chosen = [s.name for s in specs if stores is None or s.name in stores]
            if not chosen:
                continue
            reports += restore_task(
                env,
                storage,
                task_id,
                specs,
                stores=chosen,
                from_snapshot=from_snapshot,
                progress=progress,
            )
    finally:
        env.close()
    if not reports:
        raise RestoreError(f"no store {stores} in tasks {selected} of {settings.application_id!r}")
    return reports
