"""One standby task: a warm local copy of a task's persistent stores, at the last commit marker.

The copy lives where the task's active copy would live on this executor
(``<state_dir>/<app>/<task>/rocksdb/<store>``), in the same format and with the same store
metadata (marker offset, source offsets, batch id, written atomically with the data by the
restorer): when the task becomes active here, its normal open finds the copy checkpointed at
a marker and replays only the records after it. That is the whole hand-off.

The first update step after taking the lock is a restore from the copy's marker
(:class:`ChangelogRestorer`, the path an active open takes, which also checks the marker
against the changelog and rebuilds an inconsistent copy): it reads each store's changelog
partition to EOF and applies what the last commit marker closes, never the records after it
(an uncommitted tail may yet be reverted). Later steps read on from there with a consumer
kept open (:class:`~statekeeper.standby.tail.ChangelogTail`), so the tail after the last
marker is read once, not at every step. Between steps the task keeps its lock, stores and
consumer, so a step on an idle changelog costs well under a millisecond; whoever wants the
task (the active task opening here, a drill) leaves a release request and the standby
closes its stores and lets the lock go within one poll (:meth:`StandbyTask.release_if_requested`),
even in the middle of a long catch-up (checked after every applied batch). The standby itself
never leaves a release request: it only takes a free lock (:meth:`TaskLock.try_acquire`).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from statekeeper.changelog.fencing import FenceCounts
from statekeeper.changelog.listeners import BaseRestoreListener
from statekeeper.changelog.records import changelog_topic
from statekeeper.changelog.restorer import ChangelogRestorer, RestoreJob
from statekeeper.errors import StatekeeperError, StoreCorruptError
from statekeeper.standby.listener import (
    BaseStandbyUpdateListener,
    StandbyUpdateListener,
    SuspendReason,
)
from statekeeper.standby.tail import ChangelogTail
from statekeeper.state.checkpoint import write_checkpoint
from statekeeper.state.directory import TaskDirectory, TaskLock
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import AnyStore, StoreSpec, build_store

log = logging.getLogger("statekeeper.standby")

#: Records per RocksDB write while catching up; the release request is checked after each.
STANDBY_BATCH_RECORDS = 10_000
#: How long an update step waits for a busy task lock before skipping this round.
LOCK_WAIT_S = 0.05
#: Records applied after which a step closes its stores (keeping the lock; the next step
#: reopens them): closing writes RocksDB's memtable out, so a later hand-off, which must
#: close the stores before the active task can open them, never waits for a large flush.
CLOSE_AFTER_RECORDS = 20_000

#: Puts a store's files in place when the copy has none (e.g. the newest verified snapshot),
#: as :data:`statekeeper.state.task_state_manager.StoreInstaller`.
StoreInstaller = Callable[[StoreSpec, Path], Any]


class UpdateResult(StrEnum):
    """What one update step did."""

    UPDATED = "updated"  # every store read to EOF and applied up to its last marker
    BUSY = "busy"  # the task lock is held elsewhere (the active task, a drill): skipped
    RELEASED = "released"  # somebody asked for the lock during the step: it was let go
    INTERRUPTED = "interrupted"  # the owner asked the step to end early (lock kept)


def standby_specs(specs: list[StoreSpec]) -> list[StoreSpec]:
    """The stores a standby keeps: persistent and logged (in-memory stores are rebuilt from
    the changelog by every open, so a copy of them would be thrown away)."""
    return [s for s in specs if s.persistent and s.logging_enabled]


@dataclass
class StoreProgress:
    """How far one store's copy is (changelog offsets)."""

    store: str
    topic: str
    partition: int
    #: Offset of the last commit marker applied to the copy (None: nothing applied yet).
    applied_offset: int | None = None
    batch_id: int | None = None
    source_offsets: dict[str, int] = field(default_factory=dict)
    #: The changelog's end (exclusive) as last seen: the broker's high watermark (as its last
    #: fetch response or the restore's start reported it) or one past the last marker read,
    #: whichever is further. Some brokers report a watermark that trails the log end.
    end_offset: int | None = None
    #: Records of the changelog the copy has not read yet (``end_offset`` minus the read
    #: position); 0 when caught up. Records read after the last marker are not applied
    #: but not lag either: they are an uncommitted tail (``tail_keys``).
    lag: int | None = None
    #: Keys after the last marker at the last step (an uncommitted tail, not applied).
    tail_keys: int = 0


class StandbyUnavailableError(StatekeeperError):
    """The standby copy cannot be read right now."""


class _ReleaseRequested(Exception):
    """Raised from the restore listener to stop a catch-up when the lock is wanted."""


class _Interrupted(Exception):
    """Raised from the restore listener to stop a catch-up its owner no longer wants."""


class _StepListener(BaseRestoreListener):
    """Turns the restorer's callbacks during a step into standby progress and events."""

    def __init__(self, task: StandbyTask) -> None:
        self.task = task

    def on_restore_start(self, partition, store, start_offset, end_offset) -> None:  # type: ignore[no-untyped-def]
        progress = self.task.progress[store]
        applied_end = 0 if progress.applied_offset is None else progress.applied_offset + 1
        progress.end_offset = max(end_offset, applied_end, progress.end_offset or 0)
        progress.lag = max(0, progress.end_offset - applied_end)

    def on_batch_restored(self, partition, store, batch_end_offset, num_restored) -> None:  # type: ignore[no-untyped-def]
        progress = self.task.progress[store]
        progress.applied_offset = batch_end_offset
        progress.end_offset = max(progress.end_offset or 0, batch_end_offset + 1)
        progress.lag = max(0, progress.end_offset - batch_end_offset - 1)
        self.task.unflushed_records += num_restored
        self.task.listener.on_batch_loaded(
            partition, store, batch_end_offset, num_restored, progress.end_offset
        )
        if self.task.release_requested():
            raise _ReleaseRequested
        if self.task.interrupt is not None and self.task.interrupt():
            raise _Interrupted

    def on_restore_reason(self, partition, store, reason) -> None:  # type: ignore[no-untyped-def]
        log.warning(
            "standby %s: store %s (%s[%d]): %s", self.task.task_id, store, *partition, reason
        )


class StandbyTask:
    """A standby copy of one task's persistent, logged stores (see the module docstring).

    One thread (the updater) calls :meth:`update`, :meth:`release_if_requested` and
    :meth:`suspend`; they run under :attr:`mutex`, which readers of the copy take too
    (:meth:`read`); :meth:`status` may be read from any thread without it.
    """

    def __init__(
        self,
        *,
        application_id: str,
        task_id: str,
        partition: int,
        specs: list[StoreSpec],
        state_dir: Path,
        consumer_config: dict[str, Any],
        listener: StandbyUpdateListener | None = None,
        timeout_s: float = 15.0,
        lock_wait_s: float = LOCK_WAIT_S,
        batch_records: int = STANDBY_BATCH_RECORDS,
        installer: StoreInstaller | None = None,
        interrupt: Callable[[], bool] | None = None,
    ) -> None:
        """``interrupt``: asked after every applied batch; True ends a long catch-up early
        (e.g. the assignment changed), keeping what was applied (a marker's worth at a time)."""
        kept = standby_specs(specs)
        if not kept:
            raise StatekeeperError(
                f"task {task_id}: no persistent logged store to keep a standby copy of "
                f"(stores: {[s.name for s in specs]})"
            )
        self.application_id = application_id
        self.task_id = task_id
        self.partition = partition
        self.specs = kept
        self.task_dir = TaskDirectory(state_dir, application_id, task_id)
        self.listener: StandbyUpdateListener = listener or BaseStandbyUpdateListener()
        self.lock_wait_s = lock_wait_s
        self.installer = installer
        self.interrupt = interrupt
        self._lock = TaskLock(self.task_dir, timeout_s=lock_wait_s)
        self._restorer = ChangelogRestorer(
            consumer_config,
            batch_records=batch_records,
            threads=1,
            timeout_s=timeout_s,
            listener=_StepListener(self),
        )
        self._stores: dict[str, AnyStore] = {}
        self._consumer_config = dict(consumer_config)
        self._batch_records = batch_records
        self._step_listener = self._restorer.listener
        # Reads on from the copy's markers once the first step restored them (None: the next
        # step restores first); only valid while the lock has been held since it was made.
        self._tail: ChangelogTail | None = None
        #: Held by every step, release and suspension, and by :meth:`read`.
        self.mutex = threading.RLock()
        self.progress: dict[str, StoreProgress] = {
            s.name: StoreProgress(s.name, changelog_topic(application_id, s.name), partition)
            for s in kept
        }
        self.started = False
        self.suspended: SuspendReason | None = None
        #: Epoch seconds of the last complete step (None: none yet).
        self.last_update: float | None = None
        #: Seconds the last complete step took, and the steps so far.
        self.last_step_s: float | None = None
        self.steps = 0
        self.fenced = FenceCounts()  # dropped by fencing in closed reads (changelog.fencing)
        #: Seconds from the last release request (its file's mtime) to the lock being free.
        self.last_release_s: float | None = None
        self.releases = 0
        #: Records applied since the stores were opened: RocksDB holds them in its memtable
        #: and writes them out when the store closes, which a hand-off would wait for.
        self.unflushed_records = 0
        #: What the last step did (None: no step yet).
        self.last_result: UpdateResult | None = None

    # -- the lock --------------------------------------------------------------------------

    @property
    def held(self) -> bool:
        """Whether this standby holds the task lock (and its stores are open)."""
        return self._lock.held

    def release_requested(self) -> bool:
        return self._lock.held and self._lock.release_requested()

    def release_if_requested(self) -> bool:
        """Close the stores and free the lock if somebody waits for it; whether it did."""
        with self.mutex:
            return self._release_if_requested()

    def _release_if_requested(self) -> bool:
        if not self.release_requested():
            return False
        try:
            asked = self.task_dir.release_request_file.stat().st_mtime
        except OSError:
            asked = None
        self.release()
        if asked is not None:
            self.last_release_s = max(0.0, time.time() - asked)
        self.releases += 1
        log.info("standby %s: lock released on request", self.task_id)
        return True

    def release(self) -> None:
        """Close the stores and free the task lock (the copy stays on disk)."""
        with self.mutex:
            self._close_stores()
            self._lock.release()
            self._drop_tail()  # after the lock: closing a consumer can take a while

    def _drop_tail(self) -> None:
        if self._tail is not None:
            tail, self._tail = self._tail, None
            self.fenced += tail.fenced()
            try:
                tail.close()
            except Exception:
                log.exception("standby %s: closing the changelog consumer failed", self.task_id)

    def _close_stores(self) -> None:
        for name, store in list(self._stores.items()):
            try:
                store.close()
            except Exception:  # closing must not hide the original error
                log.exception("standby %s: closing store %s failed", self.task_id, name)
        self._stores.clear()
        self.unflushed_records = 0

    # -- updating --------------------------------------------------------------------------

    def update(self) -> UpdateResult:
        """One step: take the lock if free, apply each store's changelog up to its last
        commit marker, write the ``.checkpoint`` file. Raises what the restore raises
        (the lock is then released)."""
        if self.suspended is not None:
            raise StatekeeperError(f"standby {self.task_id} was suspended ({self.suspended})")
        with self.mutex:
            self.last_result = self._update()
        return self.last_result

    def _update(self) -> UpdateResult:
        if not self._lock.try_acquire(self.lock_wait_s):
            return UpdateResult.BUSY
        started = time.perf_counter()
        try:
            if not self._stores:
                self._open_stores()
            before = {n: p.applied_offset for n, p in self.progress.items()}
            if self._tail is None:
                # First step since the lock was taken: restore from the copy's marker (the
                # restorer checks it against the changelog), then read on from there.
                for spec in self.specs:
                    if self.release_requested():
                        raise _ReleaseRequested
                    self._update_store(spec)
                self._tail = self._open_tail()
            self._read_tail(self._tail)
        except _Interrupted:
            self._drop_tail()  # stopped mid-read: the next step starts from the markers
            return UpdateResult.INTERRUPTED
        except _ReleaseRequested:
            if not self.release_if_requested():
                self.release()  # the request went away meanwhile; the step ends all the same
            return UpdateResult.RELEASED
        except BaseException:
            self.release()
            raise
        if before != {n: p.applied_offset for n, p in self.progress.items()}:
            self._write_checkpoint_file()
        if self.unflushed_records >= CLOSE_AFTER_RECORDS:
            self._close_stores()
            self._open_stores()
            if self._tail is not None:
                self._tail.set_stores(self._stores_by_partition())
        self.last_step_s = time.perf_counter() - started
        self.last_update = time.time()
        self.steps += 1
        return UpdateResult.UPDATED

    def _open_stores(self) -> None:
        for spec in self.specs:
            path = self.task_dir.store_path(spec.name)
            if not path.exists() and self.installer is not None:
                self.installer(spec, path)
            try:
                store = build_store(spec, path, None)
            except StoreCorruptError as exc:
                # Invariant 4: the copy is ours to rebuild (an active open would wipe it too).
                log.warning(
                    "standby %s: corrupt copy of %s wiped: %s", self.task_id, spec.name, exc
                )
                shutil.rmtree(path, ignore_errors=True)
                store = build_store(spec, path, None)
            self._stores[spec.name] = store
            meta = store.read_metadata()
            progress = self.progress[spec.name]
            progress.applied_offset = meta.changelog_offset
            progress.batch_id = meta.batch_id
            progress.source_offsets = dict(meta.source_offsets)
        if not self.started:
            self.started = True
            for spec in self.specs:
                progress = self.progress[spec.name]
                start = 0 if progress.applied_offset is None else progress.applied_offset + 1
                self.listener.on_update_start((progress.topic, self.partition), spec.name, start)

    def _update_store(self, spec: StoreSpec) -> None:
        store = self._stores[spec.name]
        progress = self.progress[spec.name]
        job = RestoreJob(
            progress.topic,
            self.partition,
            store,
            self.task_id,
            full=False,  # no marker yet: the restorer reads from the start, wiping nothing
            log_start_may_advance=spec.kind == "window",
        )
        outcome = self._restorer.restore(job)
        self.fenced += outcome.fenced
        store.finish_restore()  # drops expired windows; clears a read cache
        meta = store.read_metadata()
        progress.applied_offset = meta.changelog_offset
        progress.batch_id = meta.batch_id
        progress.source_offsets = dict(meta.source_offsets)
        applied_end = 0 if meta.changelog_offset is None else meta.changelog_offset + 1
        progress.end_offset = max(progress.end_offset or 0, applied_end)
        progress.lag = 0
        progress.tail_keys = len(outcome.tail)

    def _stores_by_partition(self) -> dict[tuple[str, int], AnyStore]:
        return {(p.topic, self.partition): self._stores[n] for n, p in self.progress.items()}

    def _open_tail(self) -> ChangelogTail:
        starts = {
            (p.topic, self.partition): None if p.applied_offset is None else p.applied_offset + 1
            for p in self.progress.values()
        }
        # Reads go on fenced at each copy's last marker epoch (changelog.fencing).
        fences = {
            (p.topic, self.partition): self._stores[n].read_metadata().epoch
            for n, p in self.progress.items()
        }
        return ChangelogTail(
            self._consumer_config,
            self._stores_by_partition(),
            starts,
            batch_records=self._batch_records,
            on_applied=self._tail_applied,
            fences=fences,
        )

    def _tail_applied(self, tp: tuple[str, int], meta: StoreMetadata, records: int) -> None:
        name = next(n for n, p in self.progress.items() if p.topic == tp[0])
        progress = self.progress[name]
        progress.batch_id = meta.batch_id
        progress.source_offsets = dict(meta.source_offsets)
        # Progress, the batch-loaded event, and the release/interrupt checks (may raise).
        self._step_listener.on_batch_restored(tp, name, meta.changelog_offset, records)

    def _read_tail(self, tail: ChangelogTail) -> None:
        """Apply what is new in the changelogs, then record where each store stands."""
        before = {n: p.applied_offset for n, p in self.progress.items()}
        highs = tail.read()
        for name, progress in self.progress.items():
            tp = (progress.topic, self.partition)
            high = highs[tp]
            if high is not None:
                progress.end_offset = max(high, progress.end_offset or 0)
            unread = tail.unread(tp, high)
            if unread is not None:
                progress.lag = unread
            progress.tail_keys = tail.uncommitted_keys(tp)
            if progress.applied_offset != before[name]:
                self._stores[name].finish_restore()  # drops expired windows

    def _write_checkpoint_file(self) -> None:
        """The human-readable ``.checkpoint``, as an active task writes it after a commit."""
        entries = {
            name: {
                "topic": p.topic,
                "partition": self.partition,
                "offset": p.applied_offset,
                "batch_id": p.batch_id,
                "source_offsets": p.source_offsets,
            }
            for name, p in self.progress.items()
        }
        write_checkpoint(self.task_dir.checkpoint_file, entries)

    # -- stopping and reporting ------------------------------------------------------------

    def suspend(self, reason: SuspendReason) -> None:
        """Stop for good (promoted, migrated, closed): tell the listener, free the lock."""
        with self.mutex:
            self.release()
            if self.suspended is not None:
                return
            self.suspended = reason
        if not self.started:
            return
        for name, p in self.progress.items():
            self.listener.on_update_suspended(
                (p.topic, self.partition),
                name,
                -1 if p.applied_offset is None else p.applied_offset,
                p.end_offset or 0,
                reason,
            )

    def stores(self) -> dict[str, AnyStore]:
        """The open stores (empty while the lock is not held); use them on the updater's
        thread or under :attr:`mutex` (see :meth:`read`)."""
        return dict(self._stores)

    def read(
        self, store_name: str, reader: Callable[[AnyStore], Any], timeout_s: float = 1.0
    ) -> Any:
        """``reader(store)`` on the copy of ``store_name`` (at its last applied commit
        marker), between update steps. Raises :class:`StandbyUnavailableError` while the
        copy is not open here (its lock is elsewhere, e.g. with the active task) or when a
        step (a long catch-up) does not end within ``timeout_s``."""
        if not self.mutex.acquire(timeout=timeout_s):
            raise StandbyUnavailableError(
                f"standby copy of task {self.task_id} is busy catching up (waited {timeout_s} s)"
            )
        try:
            store = self._stores.get(store_name)
            if store is None:
                raise StandbyUnavailableError(
                    f"standby copy of store {store_name!r} of task {self.task_id} is not open "
                    f"here (stores: {[s.name for s in self.specs]}; the task lock is with "
                    "another owner, or the standby has not run yet)"
                )
            return reader(store)
        finally:
            self.mutex.release()

    def status(self) -> dict[str, Any]:
        """Progress for reports: lag, applied offsets, end offsets, tails, timings."""
        progress = [asdict(p) for p in self.progress.values()]
        fenced = FenceCounts(self.fenced.records, self.fenced.markers)
        if self._tail is not None:
            fenced += self._tail.fenced()
        return {
            "fenced": {"records": fenced.records, "markers": fenced.markers},
            "lag": {p["store"]: p["lag"] for p in progress},
            "applied_offsets": {p["store"]: p["applied_offset"] for p in progress},
            "end_offsets": {p["store"]: p["end_offset"] for p in progress},
            "tail_keys": {p["store"]: p["tail_keys"] for p in progress},
            "batch_id": {p["store"]: p["batch_id"] for p in progress},
            "updated": self.last_update,
            "last_step_ms": None if self.last_step_s is None else round(self.last_step_s * 1e3, 2),
            "steps": self.steps,
            "held": self.held,
            "last_result": None if self.last_result is None else self.last_result.value,
            "releases": self.releases,
            "last_release_ms": None
            if self.last_release_s is None
            else round(self.last_release_s * 1e3, 2),
        }
