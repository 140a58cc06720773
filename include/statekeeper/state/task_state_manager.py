"""Owns one task's stores: lock, open, restore, the processing-side API, close.

Commits happen in :mod:`statekeeper.state.transaction` (``TaskTransaction``): this module's
``commit`` and ``pending_transaction`` only hand the task to one. What a commit leaves after a
crash is settled here, at the next open (:meth:`TaskStateManager._reconcile`): a batch with
no commit marker yet is an uncommitted changelog tail, reverted; a batch with some or all of
its markers written is rolled forward in every store, because markers are written only after
all of the batch's records were acknowledged.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.changelog.fencing import FenceCounts, StaleEpochError
from statekeeper.changelog.listeners import (
    BaseRestoreListener,
    StateRestoreListener,
)
from statekeeper.changelog.records import CommitMarker, changelog_topic
from statekeeper.changelog.restorer import ChangelogRestorer, RestoreJob, RestoreOutcome
from statekeeper.changelog.writer import ChangelogWriter, PartitionSink
from statekeeper.errors import StatekeeperError, StoreCorruptError
from statekeeper.state.checkpoint import write_checkpoint
from statekeeper.state.directory import TaskDirectory, TaskLock
from statekeeper.state.transaction import AfterCommitHook, StepHook, TaskTransaction
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import AnyStore, StoreSpec, build_store

log = logging.getLogger("statekeeper.state")


@dataclass
class StoreSlot:
    """An open store of the task and its changelog topic."""

    spec: StoreSpec
    store: AnyStore
    topic: str | None  # None: logging disabled


#: Puts a store's files in place before it is opened, when the task has no local copy of it
#: (invariant 4: e.g. the newest verified snapshot, so only the changelog tail is replayed).
#: Called under the task lock with the store's spec and directory; returns a report with an
#: ``as_dict()`` (``source``, ``snapshot_id``, fallbacks, ...) or None when it did nothing.
StoreInstaller = Callable[[StoreSpec, Path], Any]


class TaskStateManager:
    """State of one task (``<subtopology>_<partition>``): its stores and their changelogs."""

    def __init__(
        self,
        *,
        application_id: str,
        task_id: str,
        partition: int,
        specs: list[StoreSpec],
        task_dir: TaskDirectory,
        writer: ChangelogWriter | None,
        restorer: ChangelogRestorer,
        lock_timeout_s: float = 30.0,
        commit_timeout_s: float = 30.0,
        listener: StateRestoreListener | None = None,
        commit_hooks: list[StepHook] | None = None,
        installer: StoreInstaller | None = None,
        read_only: bool = False,
        epoch: int = 0,
        fence_check_after_s: float = 10.0,
        fence_scan_interval_s: float = 30.0,
    ) -> None:
        """``read_only``: restore to each store's last commit marker and never write to a
        changelog (no revert, no roll-forward, no commit), never rewrite the checkpoint file
        and never wipe a corrupt store (it raises) — for drills and queries that must not
        touch the live app. ``installer``: see :data:`StoreInstaller`. ``epoch``: the task's
        epoch, stamped on everything it writes (:mod:`statekeeper.changelog.fencing`; 0:
        unfenced). ``fence_check_after_s``: a commit whose ownership was last confirmed longer
        ago than this (the process may have been frozen) re-checks the changelogs for a newer
        epoch before it writes markers."""
        if writer is None and not read_only:
            raise StatekeeperError(f"task {task_id}: only a read-only task may have no writer")
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise StatekeeperError(f"task {task_id}: duplicate store names in {names}")
        self.application_id = application_id
        self.task_id = task_id
        self.partition = partition
        self.specs = list(specs)
        self.task_dir = task_dir
        self.writer = writer
        self.restorer = restorer
        self.commit_timeout_s = commit_timeout_s
        self.listener = listener or BaseRestoreListener()
        # Run as each commit step completes (fault injection); see state.transaction.
        self.commit_hooks: list[StepHook] = list(commit_hooks or [])
        self.after_commit_hooks: list[AfterCommitHook] = []
        self._lock = TaskLock(task_dir, lock_timeout_s)
        self._slots: dict[str, StoreSlot] = {}
        self._metadata = StoreMetadata()
        # Processed but not yet committed (a commit interval spans micro-batches): the last
        # such batch id and source offsets, how many batches, and when the last commit was.
        self._processed: StoreMetadata | None = None
        self.uncommitted_batches = 0
        self.last_commit_monotonic = time.monotonic()
        self.restore_outcomes: list[RestoreOutcome] = []
        # Set by a failed TaskTransaction: the stores may hold a half-committed batch, so
        # nothing commits until close() and open() restored a consistent state.
        self.broken = False
        self.installer = installer
        self.read_only = read_only
        #: Per store installed by the installer at the last open: its report's ``as_dict()``.
        self.installs: dict[str, dict[str, Any]] = {}
        self.epoch = epoch
        self.fence_check_after_s = fence_check_after_s
        self.fence_scan_interval_s = fence_scan_interval_s
        self._last_scan = 0.0  # wall clock of the last read of the changelogs' tails
        #: Per logged store: keys a fenced writer wrote after this copy's open, to log again
        #: with this copy's values in the next commit (compaction keeps a key's newest record).
        self._relog: dict[str, set[bytes]] = {}
        #: What fencing dropped in this task's changelogs, over every open and check.
        self.fenced = FenceCounts()
        self._owner_confirmed = 0.0  # wall clock: when this epoch was last known current
        self._last_commit_wall = 0.0  # wall clock when the last commit's markers were acked
        #: Per logged store: a changelog offset before which no newer epoch had begun when it
        #: was last confirmed (StoreMetadata.verified_offset of the next commit).
        self._verified: dict[str, int] = {}

    # -- open and restore ------------------------------------------------------------------

    def open(self) -> list[RestoreOutcome]:
        """Lock the task, open its stores and restore them; returns what was restored."""
        self._lock.acquire()
        self.installs = {}
        try:
            jobs = [job for spec in self.specs if (job := self._open_store(spec)) is not None]
            fencing = self.epoch > 0 and not self.read_only and bool(jobs)
            if fencing:
                # Before reading: whatever an older epoch writes from here on is fenced.
                self.writer.write_begins(  # type: ignore[union-attr]
                    [(job.topic, job.partition) for job in jobs],
                    self.epoch,
                    self.commit_timeout_s,
                )
            self.restore_outcomes = self.restorer.restore_all(jobs)
            for outcome in self.restore_outcomes:
                self.fenced += outcome.fenced
            if fencing:
                self._check_not_superseded(max(o.fence for o in self.restore_outcomes))
                self._owner_confirmed = self._last_scan = time.time()
                # The read to the end saw no newer epoch: everything up to the last marker
                # it read is verified.
                self._verified = {
                    o.job.store.name: o.marker_offset or 0 for o in self.restore_outcomes
                }
            if not self.read_only:
                self._reconcile(self.restore_outcomes)
            for slot in self._slots.values():
                slot.store.finish_restore()
            self._metadata = self._agreed_metadata()
            self._processed, self.uncommitted_batches = None, 0
            self.last_commit_monotonic = time.monotonic()
            if not self.read_only:
                self.write_checkpoint_file()
            self.broken = False
        except BaseException:
            self._close_stores()
            self._lock.release()
            raise
        return self.restore_outcomes

    def _open_store(self, spec: StoreSpec) -> RestoreJob | None:
        topic = changelog_topic(self.application_id, spec.name) if spec.logging_enabled else None
        path = self.task_dir.store_path(spec.name)
        sink = None
        if topic is not None and not self.read_only:
            sink = PartitionSink(self.writer, topic, self.partition, self.epoch)

        reason = None
        if topic is not None and spec.persistent and not path.exists():
            self._install(spec, path)
        try:
            store = build_store(spec, path, sink)
        except StoreCorruptError as exc:
            if self.read_only:
                # A read-only copy never repairs what it reads; the owner's open does that.
                raise
            # Invariant 4: unreadable local files are wiped and rebuilt (snapshot + tail when
            # an installer has one, else the whole changelog).
            reason = f"corrupt local state, wiped: {exc}"
            log.warning("task %s: %s", self.task_id, reason)
            shutil.rmtree(path, ignore_errors=True)
            if topic is not None and self._install(spec, path):
                reason = None
            try:
                store = build_store(spec, path, sink)
            except StoreCorruptError:
                shutil.rmtree(path, ignore_errors=True)
                self.installs.pop(spec.name, None)
                reason = f"corrupt local state and snapshot, wiped: {exc}"
                store = build_store(spec, path, sink)
        self._slots[spec.name] = StoreSlot(spec, store, topic)
        if topic is None:
            return None
        # In-memory stores always restore fully; that is normal and needs no reason.
        full = reason is not None or not spec.persistent
        if not full and store.read_metadata().changelog_offset is None:
            full, reason = True, "no local state"
        return RestoreJob(
            topic,
            self.partition,
            store,
            self.task_id,
            full=full,
            reason=reason,
            log_start_may_advance=spec.kind == "window",
        )

    def _install(self, spec: StoreSpec, path: Path) -> bool:
        """Let the installer put ``spec``'s files at ``path``; whether a copy is now there."""
        if self.installer is None:
            return False
        report = self.installer(spec, path)
        if report is None:
            return False
        self.installs[spec.name] = report.as_dict()
        return path.exists()

    def _reconcile(self, outcomes: list[RestoreOutcome]) -> None:
        """Make every store of the task agree on the last committed batch (module docstring)."""
        if not outcomes:
            return
        leader = max(
            (o for o in outcomes if o.last_marker is not None),
            key=lambda o: o.last_marker.batch_id,  # type: ignore[union-attr]
            default=None,
        )
        lead = leader.last_marker if leader else None
        if lead is not None and lead.batch_id < 0:
            # Batch -1 is what a revert marks when the task never committed: no batch to roll
            # forward to, so another store's marker-less tail is uncommitted and reverted too.
            lead = None
        # Per store to finish: records to apply locally, records to log to its changelog.
        Records = list[tuple[bytes, bytes | None]]
        to_mark: list[tuple[RestoreOutcome, Records, Records]] = []
        for outcome in outcomes:
            store = outcome.job.store
            behind = lead is not None and (
                outcome.last_marker is None or outcome.last_marker.batch_id < lead.batch_id
            )
            if behind:
                # Some markers of the leader's batch were written, so all its records were
                # acked before: the tail is that batch. Apply it and finish the commit.
                to_mark.append((outcome, outcome.tail, []))
                log.warning(
                    "task %s: store %s rolled forward to batch %s (%d tail records)",
                    self.task_id,
                    store.name,
                    lead.batch_id,  # type: ignore[union-attr]
                    len(outcome.tail),
                )
            elif outcome.tail or outcome.fenced_keys:
                # An attempt crashed before its markers: revert its records in the changelog
                # to the committed values, so a later full restore cannot pick them up. Keys
                # a fenced writer wrote are logged again too: compaction keeps a key's newest
                # record, and that must not be the fenced one.
                keys = dict.fromkeys([k for k, _ in outcome.tail])
                keys.update(dict.fromkeys(sorted(outcome.fenced_keys)))
                revert = [(k, store.committed_value(k)) for k in keys]
                to_mark.append((outcome, [], revert))
                log.info(
                    "task %s: store %s: reverting %d uncommitted changelog records",
                    self.task_id,
                    store.name,
                    len(revert),
                )
            elif self.epoch and (
                outcome.last_marker is None or outcome.last_marker.epoch < self.epoch
            ):
                # The first open under this epoch: a marker of it re-commits the state, so
                # compaction can never leave an older epoch's marker as the last word.
                to_mark.append((outcome, [], []))
        if not to_mark:
            return
        for outcome, _, revert in to_mark:
            if revert:
                PartitionSink(self.writer, outcome.job.topic, self.partition, self.epoch).send_all(
                    revert
                )
        self.writer.flush(self.commit_timeout_s)
        markers = [
            (
                outcome.job.topic,
                self.partition,
                CommitMarker(
                    batch_id=lead.batch_id if lead else -1,
                    task_id=self.task_id,
                    store=outcome.job.store.name,
                    source_offsets=dict(lead.source_offsets) if lead else {},
                    epoch=self.epoch,
                ),
            )
            for outcome, _, _ in to_mark
        ]
        offsets = self.writer.write_markers(markers, self.commit_timeout_s)
        for (outcome, apply, _), (topic, partition, marker) in zip(to_mark, markers, strict=True):
            meta = StoreMetadata(
                offsets[(topic, partition)],
                marker.batch_id,
                marker.source_offsets,
                self.epoch,
                self.verified_offset(outcome.job.store.name),
            )
            outcome.job.store.restore_batch(apply, meta)
            outcome.last_marker, outcome.marker_offset = marker, meta.changelog_offset

    # -- fencing (statekeeper.changelog.fencing) -------------------------------------------

    def _check_not_superseded(self, fence: int) -> None:
        if fence > self.epoch:
            raise StaleEpochError(
                f"task {self.task_id}: epoch {fence} has begun in its changelogs and this copy "
                f"runs under epoch {self.epoch}: another executor owns the task now (this "
                "process was frozen or cut off), so it stops without writing",
                epoch=self.epoch,
                fence=fence,
            )

    def drain_fenced(self) -> FenceCounts:
        """What fencing dropped in this task's changelogs since the last call."""
        fenced, self.fenced = self.fenced, FenceCounts()
        return fenced

    def confirm_owner(self, at: float) -> None:
        """The driver placed this task here under its epoch at wall-clock time ``at``: no
        newer epoch had begun then, so the markers written before are verified."""
        if at > self._owner_confirmed and at > self._last_commit_wall:
            self._verify_markers()
        self._owner_confirmed = max(self._owner_confirmed, at)

    def _verify_markers(self) -> None:
        for slot in self._slots.values():
            if slot.topic is not None:
                offset = slot.store.read_metadata().changelog_offset
                if offset is not None:
                    self._verified[slot.spec.name] = offset

    def verified_offset(self, store: str) -> int | None:
        """See :attr:`StoreMetadata.verified_offset` (None: the task runs unfenced)."""
        return self._verified.get(store) if self.epoch else None

    def note_committed(self) -> None:
        """A commit's markers were acknowledged now (TaskTransaction)."""
        self._last_commit_wall = time.time()

    def check_still_owner(self) -> None:
        """Before a commit writes markers: read the changelogs from the last verified commit
        on when this epoch was confirmed longer ago than ``fence_check_after_s`` (a freeze,
        a long pause) or ``fence_scan_interval_s`` passed since the last read, and raise
        :class:`StaleEpochError` when a newer epoch has begun there. Keys a fenced writer
        wrote there (a zombie that resumed after this copy opened) are kept for
        :meth:`take_relog`."""
        if not self.epoch:
            return
        now = time.time()
        if (
            now - self._owner_confirmed <= self.fence_check_after_s
            and now - self._last_scan < self.fence_scan_interval_s
        ):
            return
        fence = 0
        for slot in self._slots.values():
            if slot.topic is None:
                continue
            # From the last point known to be ours: a commit this task made unchecked after
            # a newer epoch began (it froze right after a confirmation) must not hide it.
            start = self._verified.get(slot.spec.name)
            if start is None:
                start = slot.store.read_metadata().changelog_offset
            seen = self.restorer.newest_epoch(slot.topic, self.partition, start, self.epoch)
            self.fenced += seen.fenced
            if seen.fenced_keys:
                self._relog.setdefault(slot.spec.name, set()).update(seen.fenced_keys)
            fence = max(fence, seen.fence)
        self._check_not_superseded(fence)
        self._verify_markers()  # every marker before the read's start is ours and current
        self._owner_confirmed = self._last_scan = now

    def take_relog(self) -> list[tuple[str, list[tuple[bytes, bytes | None]]]]:
        """Per changelog topic, the keys fenced writers wrote since this copy opened, with
        this copy's current values (the batch being committed included): logged again
        before the commit's markers, so compaction cannot keep a fenced record as a key's
        last word (docs/fencing.md)."""
        relog, self._relog = self._relog, {}
        out = []
        for name, keys in sorted(relog.items()):
            slot = self._slots[name]
            if slot.topic is not None:
                out.append((slot.topic, [(k, slot.store.committed_value(k)) for k in sorted(keys)]))
        return out

    def _agreed_metadata(self) -> StoreMetadata:
        """The least advanced logged store's metadata (after reconcile they all agree)."""
        slots = [s for s in self._slots.values() if s.topic] or list(self._slots.values())
        metas = [slot.store.read_metadata() for slot in slots]
        return min(
            metas, key=lambda m: -1 if m.batch_id is None else m.batch_id, default=StoreMetadata()
        )

    # -- processing-side API ---------------------------------------------------------------

    def store(self, name: str) -> AnyStore:
        try:
            return self._slots[name].store
        except KeyError:
            raise StatekeeperError(
                f"task {self.task_id} has no store {name!r}; stores: {sorted(self._slots)}"
            ) from None

    @property
    def stores(self) -> dict[str, AnyStore]:
        return {name: slot.store for name, slot in self._slots.items()}

    @property
    def slots(self) -> list[StoreSlot]:
        """The open stores with their changelog topics, in spec order."""
        return list(self._slots.values())

    @property
    def last_batch_id(self) -> int | None:
        """The last committed batch."""
        return self._metadata.batch_id

    @property
    def processed_offsets(self) -> dict[str, int]:
        """Next source offset to process per ``topic:partition`` (skip anything below),
        uncommitted batches included: the stores hold their writes."""
        return dict((self._processed or self._metadata).source_offsets)

    @property
    def committed_offsets(self) -> dict[str, int]:
        """Next source offset per ``topic:partition`` as of the last commit."""
        return dict(self._metadata.source_offsets)

    @property
    def has_uncommitted(self) -> bool:
        return self._processed is not None

    def mark_processed(self, batch_id: int, source_offsets: dict[str, int]) -> None:
        """Record that the stores now hold batch ``batch_id`` (committed later by
        :meth:`pending_transaction`)."""
        self._processed = StoreMetadata(None, batch_id, dict(source_offsets))
        self.uncommitted_batches += 1

    def commit_due(self, interval_s: float, max_batches: int) -> bool:
        """Whether the uncommitted batches should be committed now: the interval passed,
        ``max_batches`` are uncommitted, the task has never committed (its first batch has no
        logged start offsets to replay from), or it has never committed an input partition
        it now reads."""
        if self._processed is None:
            return False
        return (
            self._metadata.batch_id is None
            or not self._processed.source_offsets.keys() <= self._metadata.source_offsets.keys()
            or self.uncommitted_batches >= max_batches
            or time.monotonic() - self.last_commit_monotonic >= interval_s
        )

    # -- commit: see statekeeper.state.transaction -----------------------------------------

    def pending_transaction(self) -> TaskTransaction | None:
        """A transaction committing the batches marked processed since the last commit (as
        the last of them), or None when there are none."""
        if self._processed is None or self._processed.batch_id is None:
            return None
        self._check_writable()
        return TaskTransaction(self, self._processed.batch_id, self._processed.source_offsets)

    def commit(self, batch_id: int, source_offsets: dict[str, int]) -> None:
        """Commit everything written since the last commit as batch ``batch_id``."""
        self._check_writable()
        TaskTransaction(self, batch_id, source_offsets).commit()

    def _check_writable(self) -> None:
        if self.read_only:
            raise StatekeeperError(f"task {self.task_id} was opened read-only: it cannot commit")

    def add_after_commit_hook(self, hook: AfterCommitHook) -> None:
        """Call ``hook`` after every successful commit of this task, for as long as this
        manager lives (a parked task keeps it across batches)."""
        self.after_commit_hooks.append(hook)

    def advance_committed(self, batch_id: int, source_offsets: dict[str, int]) -> None:
        """The stores were written as batch ``batch_id`` (by a TaskTransaction): every
        write staged so far is committed."""
        self._metadata = StoreMetadata(None, batch_id, dict(source_offsets))
        self._processed, self.uncommitted_batches = None, 0
        self.last_commit_monotonic = time.monotonic()

    def write_checkpoint_file(self) -> None:
        """Rewrite the human-readable ``.checkpoint`` file from the stores' metadata."""
        entries: dict[str, dict[str, Any]] = {}
        for name, slot in self._slots.items():
            if slot.topic is None:
                continue
            meta = slot.store.read_metadata()
            entries[name] = {
                "topic": slot.topic,
                "partition": self.partition,
                "offset": meta.changelog_offset,
                "batch_id": meta.batch_id,
                "source_offsets": meta.source_offsets,
            }
        self.task_dir.path.mkdir(parents=True, exist_ok=True)
        write_checkpoint(self.task_dir.checkpoint_file, entries)

    # -- close -----------------------------------------------------------------------------

    def _close_stores(self) -> None:
        for slot in self._slots.values():
            try:
                slot.store.close()
            except Exception:  # closing must not hide the original error
                log.exception("task %s: closing store %s failed", self.task_id, slot.spec.name)
        self._slots.clear()

    def release_requested(self) -> bool:
        """Whether another opener waits for this task's lock (see TaskLock)."""
        return self._lock.release_requested()

    def close(self) -> None:
        """Close stores (uncommitted writes are dropped) and release the task lock."""
        if self._processed is not None:
            log.info(
                "task %s: closed with %d uncommitted batch(es); its next open replays them",
                self.task_id,
                self.uncommitted_batches,
            )
            self._processed, self.uncommitted_batches = None, 0
        self._close_stores()
        self._lock.release()

    def __enter__(self) -> TaskStateManager:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
