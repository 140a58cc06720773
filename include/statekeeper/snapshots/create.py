"""Take a task's snapshot at a commit boundary: stage every store locally, then upload.

Two phases, so the first can run inside an after-commit hook
(:meth:`TaskStateManager.add_after_commit_hook`) and the second in a background uploader:

* :func:`stage_task` — the only part that touches the live stores (a RocksDB checkpoint,
  an in-memory dump); its duration is the processing pause, reported per store.
* :func:`upload_staged` — hashes the files (unless staging did), uploads those ``shared/``
  lacks (in parallel), writes the manifest last and removes the local staging directory.

Self-healing: before a new snapshot references a file an earlier snapshot already shares,
the file is confirmed present in the storage with the right size (one stat or HEAD per file
and snapshot run, :class:`~statekeeper.snapshots.storage.SharedFiles`); a missing one is
uploaded again from the task's local checkpoint, so the earlier snapshots that reference it
verify again too. ``files_healed`` in the result counts those.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import shutil
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.snapshots.catalog import latest_manifest
from statekeeper.snapshots.manifest import (
    TOPOLOGY_KEY,
    Manifest,
    SnapshotError,
    new_snapshot_id,
    utc_now,
)
from statekeeper.snapshots.staging import StagedStore, describe_staged, stage_store
from statekeeper.snapshots.storage import SharedFiles, SnapshotStorage
from statekeeper.state.transaction import CommittedBatch
from statekeeper.stores.serdes import serde_name

UPLOAD_THREADS = 4


def _statekeeper_version() -> str:
    # From the installed distribution: ops may not import the package facade (layering).
    try:
        return importlib.metadata.version("statekeeper")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


@dataclass
class StagedSnapshot:
    """One store staged locally with everything its manifest needs but the parent."""

    manifest: Manifest  # parent unset; files as staged
    staged: StagedStore


@dataclass
class SnapshotResult:
    """What uploading one staged store did."""

    manifest: Manifest
    manifest_path: str
    bytes_total: int
    bytes_uploaded: int
    files_uploaded: int
    pause_ms: float
    upload_seconds: float
    #: Files the previous snapshot of the store already referenced that were missing from
    #: the storage (or of the wrong size) and were uploaded again.
    files_healed: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "snapshot_id": self.manifest.snapshot_id,
            "task": self.manifest.task,
            "store": self.manifest.store,
            "batch_id": self.manifest.batch_id,
            "key_count": self.manifest.key_count,
            "files": len(self.manifest.files),
            "manifest": self.manifest_path,
            "bytes_total": self.bytes_total,
            "bytes_uploaded": self.bytes_uploaded,
            "files_uploaded": self.files_uploaded,
            "files_healed": self.files_healed,
            "pause_ms": round(self.pause_ms, 3),
            "upload_seconds": round(self.upload_seconds, 3),
        }


def stage_task(
    task: Any,
    staging_dir: Path,
    committed: CommittedBatch | None = None,
    stores: list[str] | None = None,
    *,
    describe: bool = True,
    topology: dict[str, Any] | None = None,
) -> list[StagedSnapshot]:
    """Stage the stores of an open ``TaskStateManager`` right after a commit (or right after
    ``open()``, which leaves it at its last commit). ``committed`` (from an after-commit
    hook) supplies the marker offsets; otherwise the stores' own metadata does.
    ``describe=False``: hash the files and count the keys later, in :func:`upload_staged`
    (the running app's uploader thread), so the task pauses only for the checkpoints.
    ``topology``: the fingerprint (JSON) of the topology that wrote the state, recorded in
    every manifest (``Manifest.topology``)."""
    if task.has_uncommitted:
        raise SnapshotError(
            f"task {task.task_id} has uncommitted batches: snapshots are taken at a commit"
        )
    slots = [s for s in task.slots if stores is None or s.spec.name in stores]
    if stores is not None and len(slots) != len(set(stores)):
        known = sorted(s.spec.name for s in task.slots)
        raise SnapshotError(f"task {task.task_id} has no store among {stores}; stores: {known}")
    now = utc_now()
    staged: list[StagedSnapshot] = []
    for slot in slots:
        spec = slot.spec
        directory = (
            staging_dir
            / task.application_id
            / task.task_id
            / (f"{spec.name}-{uuid.uuid4().hex[:12]}")
        )
        store = stage_store(slot.store, directory, describe=describe)
        meta = store.metadata
        marker = meta.changelog_offset
        batch_id, sources = meta.batch_id, meta.source_offsets
        if committed is not None:
            marker = committed.marker_offsets.get(spec.name, marker)
            batch_id, sources = committed.batch_id, dict(committed.source_offsets)
        window = None
        if spec.kind == "window":
            window = {
                "size_ms": spec.window_size_ms,
                "grace_ms": spec.grace_ms,
                "retention_ms": spec.retention_ms,
            }
        manifest = Manifest(
            snapshot_id=new_snapshot_id(task.task_id, spec.name, batch_id, now),
            app=task.application_id,
            task=task.task_id,
            store=spec.name,
            store_kind=spec.kind,
            layout=store.layout,
            key_serde=serde_name(spec.key_serde),
            value_serde=serde_name(spec.value_serde),
            changelog_topic=slot.topic,
            changelog_partition=task.partition,
            marker_offset=marker,
            source_offsets=dict(sources),
            batch_id=batch_id,
            key_count=store.key_count,
            files=store.files,
            created_at=now.isoformat(),
            statekeeper_version=_statekeeper_version(),
            window=window,
            extra={TOPOLOGY_KEY: topology} if topology is not None else {},
        )
        staged.append(StagedSnapshot(manifest, store))
    return staged


def describe_snapshot(staged: StagedSnapshot) -> StagedSnapshot:
    """``staged`` with its files hashed and keys counted (staged with ``describe=False``)."""
    store = describe_staged(staged.staged)
    if store is staged.staged:
        return staged
    manifest = dataclasses.replace(staged.manifest, files=store.files, key_count=store.key_count)
    return StagedSnapshot(manifest, store)


def upload_staged(
    staged: StagedSnapshot,
    storage: SnapshotStorage,
    *,
    keep_staging: bool = False,
    shared: SharedFiles | None = None,
) -> SnapshotResult:
    """Upload the files ``shared/`` lacks (or holds with the wrong size), then write the
    manifest (last). ``shared``: the snapshot run's confirmed files, so stores and tasks
    snapshotted together check each shared file once."""
    if staged.manifest.app != storage.app:
        raise SnapshotError(
            f"snapshot of app {staged.manifest.app!r} cannot go to app {storage.app!r}'s storage"
        )
    started = time.perf_counter()
    staged = describe_snapshot(staged)
    files = staged.manifest.files
    directory = staged.staged.directory
    shared = shared if shared is not None else SharedFiles(storage)
    parent = latest_manifest(storage, staged.manifest.task, staged.manifest.store)
    known = {f.sha256 for f in parent.files} if parent is not None else set()
    with ThreadPoolExecutor(UPLOAD_THREADS) as pool:
        uploaded = list(
            pool.map(
                lambda f: shared.ensure(
                    directory / f.name, f.sha256, f.size, known=f.sha256 in known
                ),
                files,
            )
        )
    manifest = dataclasses.replace(
        staged.manifest, parent=parent.snapshot_id if parent is not None else None
    )
    path = storage.write_manifest(manifest)
    if not keep_staging:
        shutil.rmtree(directory, ignore_errors=True)
    return SnapshotResult(
        manifest=manifest,
        manifest_path=path,
        bytes_total=sum(f.size for f in files),
        bytes_uploaded=sum(f.size for f, up in zip(files, uploaded, strict=True) if up),
        files_uploaded=sum(uploaded),
        files_healed=sum(
            1 for f, up in zip(files, uploaded, strict=True) if up and f.sha256 in known
        ),
        pause_ms=staged.staged.pause_s * 1000,
        upload_seconds=time.perf_counter() - started,
    )


def snapshot_task(
    task: Any,
    storage: SnapshotStorage,
    staging_dir: Path,
    committed: CommittedBatch | None = None,
    stores: list[str] | None = None,
    *,
    shared: SharedFiles | None = None,
    topology: dict[str, Any] | None = None,
) -> list[SnapshotResult]:
    """Stage and upload every store (or ``stores``) of an open task, one after the other
    (``shared``: see :func:`upload_staged`; by default one per call; ``topology``: see
    :func:`stage_task`)."""
    staged = stage_task(task, staging_dir, committed, stores, topology=topology)
    shared = shared if shared is not None else SharedFiles(storage)
    try:
        return [upload_staged(s, storage, shared=shared) for s in staged]
    finally:
        for s in staged:
            shutil.rmtree(s.staged.directory, ignore_errors=True)


def snapshot_now(
    settings: Any,
    task: Any,
    *,
    stores: list[str] | None = None,
    topology: dict[str, Any] | None = None,
) -> list[str]:
    """Snapshot an open task right after its commit into the app's snapshot storage
    (created if missing), staging in a temporary directory; the snapshot ids. What a
    migration, a store fill and a dataset backfill end each task with."""
    import tempfile

    from statekeeper.snapshots.storage import storage_for

    storage = storage_for(settings, create=True)
    with tempfile.TemporaryDirectory(prefix="statekeeper-snapshot-") as staging:
        results = snapshot_task(task, storage, Path(staging), stores=stores, topology=topology)
    return [r.manifest.snapshot_id for r in results]
