"""Restore every store of every task of an app into a sandbox directory, timed (the RTO).

The sandbox is a copy of the settings with ``state_dir=<sandbox>``, opened through a
read-only :class:`~statekeeper.state.environment.StateEnvironment`: each store gets the
newest verified snapshot (:func:`statekeeper.snapshots.install.installer_for`), or a named
one, or none (full replay), then the changelog tail up to its last commit marker. Nothing
is written to a changelog, and the live app's directory, lock and changelogs are never
touched, so the live app may keep running. Contents are read into memory for the checks and
the sandbox task is closed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.changelog.records import changelog_topic
from statekeeper.errors import ConfigError
from statekeeper.kafka.admin import make_admin, partition_count
from statekeeper.ops.drill.contents import Contents, store_contents
from statekeeper.ops.live_task import open_store_view
from statekeeper.processing.topology import task_id
from statekeeper.settings import StatekeeperSettings
from statekeeper.snapshots.catalog import list_snapshots
from statekeeper.snapshots.install import LATEST, NONE, install_store, installer_for
from statekeeper.snapshots.manifest import Manifest
from statekeeper.snapshots.storage import SnapshotStorage
from statekeeper.state.environment import StateEnvironment
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import StoreSpec
from statekeeper.stores.typed import WindowStore
from statekeeper.stores.window_bytes import WindowBytesStore, changelog_window_key

# A window store's inner keys starting with this are bookkeeping (observed stream time).
_WINDOW_BOOKKEEPING = b"\xff" * 8

Say = Callable[[str], None]


@dataclass
class RestoredStore:
    """One store as the sandbox restore left it."""

    spec: StoreSpec
    contents: Contents
    metadata: StoreMetadata
    source: str
    snapshot_id: str | None = None
    manifest: Manifest | None = None
    records_replayed: int = 0
    bytes_downloaded: int = 0
    fallbacks: list[dict[str, str]] = field(default_factory=list)
    observed_stream_time: int | None = None  # window stores
    #: The installed snapshot's own entries (changelog keys) and raw key count, read from its
    #: checkpoint before the tail replay: what the consistency check compares with when the
    #: live app runs, and what the manifest's key count must equal.
    snapshot_contents: Contents | None = None
    snapshot_raw_keys: int | None = None


@dataclass
class RestoredTask:
    """A task restored in the sandbox: its stores and the offsets of its last commit."""

    task_id: str
    subtopology: int
    partition: int
    specs: list[StoreSpec]
    stores: dict[str, RestoredStore]
    batch_id: int | None
    source_offsets: dict[str, int]  # the agreed (least advanced) store's, as a task skips by
    seconds: float


@dataclass
class SandboxRestore:
    """Every restored task, and the RTO: seconds until all of them were open."""

    tasks: list[RestoredTask]
    rto_s: float


def drill_tasks(settings: StatekeeperSettings, topology: Any) -> list[tuple[str, int, int]]:
    """``(task id, subtopology, partition)`` of every stateful task: one per partition of the
    subtopology's changelogs (they are co-partitioned with its sources)."""
    admin = make_admin(settings.bootstrap_servers)
    found = []
    for sub in topology.subtopologies:
        logged = [s for s in topology.store_specs(sub.id) if s.logging_enabled]
        if not logged:
            continue
        topic = changelog_topic(settings.application_id, logged[0].name)
        count = partition_count(admin, topic, timeout_s=settings.broker_timeout_s)
        if count is None:
            raise ConfigError(
                f"changelog topic {topic!r} of app {settings.application_id!r} does not exist "
                "on the broker: the app never ran there, or this is another app's spec"
            )
        found += [(task_id(sub.id, p), sub.id, p) for p in range(count)]
    if not found:
        raise ConfigError(f"app {settings.application_id!r} has no logged store to drill")
    return found


def _snapshot_entries(spec: StoreSpec, path: Path) -> tuple[Contents, int]:
    """A freshly installed checkpoint's entries (changelog keys) and its raw key count (what
    a manifest's ``key_count`` counts). The copy is the sandbox's own: a custom store whose
    supplier has no read-only view is opened with the supplier itself."""
    if spec.supplier is not None and not spec.supplier.has_read_only_view:
        db: Any = spec.supplier.get(spec.name, path)
    else:
        db = open_store_view(path, spec)
    entries: Contents = {}
    raw_keys = 0
    try:
        for key, value in db.range(None, None):
            raw_keys += 1
            if spec.kind != "window":
                entries[key] = value
            elif not key.startswith(_WINDOW_BOOKKEEPING):
                inner, start = WindowBytesStore._split_store_key(key)
                entries[changelog_window_key(inner, start)] = value
    finally:
        db.close()
    return entries, raw_keys


class _Installer:
    """A StoreInstaller for one sandbox task that also reads what it installed (timed apart,
    so the RTO counts only the restore)."""

    def __init__(
        self,
        settings: StatekeeperSettings,
        storage: SnapshotStorage,
        task: str,
        partition: int,
        from_snapshot: str,
        named: Manifest | None,
    ) -> None:
        self.latest = installer_for(settings, storage, task, partition)
        self.settings, self.storage, self.task, self.partition = settings, storage, task, partition
        self.from_snapshot, self.named = from_snapshot, named
        self.read: dict[str, tuple[Contents, int]] = {}
        self.extra_s = 0.0

    def __call__(self, spec: StoreSpec, path: Path) -> Any:
        if self.named is not None and self.named.store == spec.name:
            report = install_store(
                self.settings,
                self.storage,
                self.task,
                self.partition,
                spec.name,
                self.from_snapshot,
                spec=spec,
            )
        else:
            report = self.latest(spec, path)
        if report.source == "snapshot" and path.exists():
            t0 = time.perf_counter()
            self.read[spec.name] = _snapshot_entries(spec, path)
            self.extra_s += time.perf_counter() - t0
        return report


def restore_sandbox(
    settings: StatekeeperSettings,
    topology: Any,
    storage: SnapshotStorage | None,
    sandbox: Path,
    *,
    from_snapshot: str = LATEST,
    say: Say | None = None,
) -> SandboxRestore:
    """Restore every stateful task of the app into ``sandbox`` (see the module docstring)."""
    say = say or (lambda _: None)
    sandbox_settings = settings.model_copy(update={"state_dir": Path(sandbox)})
    manifests = list_snapshots(storage) if storage is not None else []
    named = None
    if from_snapshot not in (LATEST, NONE):
        named = next((m for m in manifests if m.snapshot_id == from_snapshot), None)
        if named is None:
            raise ConfigError(
                f"no snapshot {from_snapshot!r} of app {settings.application_id!r}"
                + (f" in {storage.url}" if storage is not None else "")
                + " (see `statekeeper snapshot list`)"
            )
    by_id = {m.snapshot_id: m for m in manifests}
    env = StateEnvironment(sandbox_settings, read_only=True)
    tasks: list[RestoredTask] = []
    rto = 0.0
    try:
        for tid, sub, partition in drill_tasks(settings, topology):
            specs = topology.store_specs(sub)
            installer = None
            if storage is not None and from_snapshot != NONE:
                installer = _Installer(
                    sandbox_settings,
                    storage,
                    tid,
                    partition,
                    from_snapshot,
                    named if named is not None and named.task == tid else None,
                )
            say(f"restoring task {tid} into the sandbox")
            started = time.perf_counter()
            task = env.task(tid, partition, specs, installer=installer)
            outcomes = task.open()
            seconds = time.perf_counter() - started - (installer.extra_s if installer else 0.0)
            rto += seconds
            try:
                restored = {
                    spec.name: _restored_store(spec, task, installer, by_id) for spec in specs
                }
                for outcome in outcomes:
                    store = restored[outcome.job.store.name]
                    store.records_replayed = outcome.restored_records
                    if store.source == "snapshot" and outcome.full:
                        # The restorer found the snapshot inconsistent with the changelog.
                        reason = outcome.job.reason or "?"
                        store.fallbacks.append(
                            {"snapshot_id": store.snapshot_id or "", "reason": reason}
                        )
                        store.source, store.snapshot_id, store.manifest = "full replay", None, None
                tasks.append(
                    RestoredTask(
                        tid,
                        sub,
                        partition,
                        specs,
                        restored,
                        task.last_batch_id,
                        task.committed_offsets,
                        seconds,
                    )
                )
            finally:
                task.close()
            say(f"task {tid} restored in {seconds:.3f} s")
    finally:
        env.close()
    return SandboxRestore(tasks, rto)


def _restored_store(
    spec: StoreSpec, task: Any, installer: _Installer | None, by_id: dict[str, Manifest]
) -> RestoredStore:
    store = task.store(spec.name)
    install = task.installs.get(spec.name)
    if not spec.logging_enabled:
        source = "none (logging disabled)"
    elif install is not None:
        source = install["source"]
    elif spec.persistent:
        source = "full replay"
    else:
        source = "changelog (in-memory store)"
    restored = RestoredStore(
        spec=spec,
        contents=store_contents(store),
        metadata=store.read_metadata(),
        source=source,
        observed_stream_time=store.observed_stream_time if isinstance(store, WindowStore) else None,
    )
    if install is not None:
        restored.snapshot_id = install.get("snapshot_id")
        restored.manifest = by_id.get(restored.snapshot_id or "")
        restored.bytes_downloaded = int(install.get("bytes_downloaded") or 0)
        restored.fallbacks = list(install.get("fallbacks") or [])
    if installer is not None and spec.name in installer.read:
        restored.snapshot_contents, restored.snapshot_raw_keys = installer.read[spec.name]
    return restored
