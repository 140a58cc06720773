"""Owns one task's stores: lock, open, restore, the commit protocol, close.

Commit protocol (DESIGN.md invariants 1-3), in order:
  1. flush record caches: every dirty key goes to the changelog as an absolute value;
  2. wait until the broker acknowledged every changelog record;
  3. write one commit marker per changelog partition (batch id + source offsets), acked;
  4. commit each store: staged data + metadata (marker offset, source offsets, batch id)
     in one RocksDB write;
  5. rewrite the human-readable ``.checkpoint`` file.
A crash before 3 leaves an uncommitted changelog tail that the next open reverts; a crash
between 3 and 4 is rolled forward from the changelog; a crash in the middle of 3 (some
markers written) is rolled forward too, because step 2 proved all records were acked.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

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
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import AnyStore, StoreSpec, build_store

log = logging.getLogger("statekeeper.state")

CommitStep = str  # "changelog_produced" | "markers_written" | "stores_committed"
CommitHook = Callable[[CommitStep, int], None]


@dataclass
class _StoreSlot:
    spec: StoreSpec
    store: AnyStore
    topic: str | None  # None: logging disabled


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
        writer: ChangelogWriter,
        restorer: ChangelogRestorer,
        lock_timeout_s: float = 30.0,
        commit_timeout_s: float = 30.0,
        listener: StateRestoreListener | None = None,
        commit_hooks: list[CommitHook] | None = None,
    ) -> None:
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
        self.commit_hooks = list(commit_hooks or [])
        self._lock = TaskLock(task_dir, lock_timeout_s)
        self._slots: dict[str, _StoreSlot] = {}
        self._metadata = StoreMetadata()
        # Processed but not yet committed (a commit interval spans micro-batches): the last
        # such batch id and source offsets, how many batches, and when the last commit was.
        self._processed: StoreMetadata | None = None
        self.uncommitted_batches = 0
        self.last_commit_monotonic = time.monotonic()
        self.restore_outcomes: list[RestoreOutcome] = []
        self._broken = False

    # -- open and restore ------------------------------------------------------------------

    def open(self) -> list[RestoreOutcome]:
        """Lock the task, open its stores and restore them; returns what was restored."""
        self._lock.acquire()
        try:
            jobs = [job for spec in self.specs if (job := self._open_store(spec)) is not None]
            self.restore_outcomes = self.restorer.restore_all(jobs)
            self._reconcile(self.restore_outcomes)
            for slot in self._slots.values():
                slot.store.finish_restore()
            self._metadata = self._agreed_metadata()
            self._processed, self.uncommitted_batches = None, 0
            self.last_commit_monotonic = time.monotonic()
            self._write_checkpoint()
        except BaseException:
            self._close_stores()
            self._lock.release()
            raise
        return self.restore_outcomes

    def _open_store(self, spec: StoreSpec) -> RestoreJob | None:
        topic = changelog_topic(self.application_id, spec.name) if spec.logging_enabled else None
        path = self.task_dir.store_path(spec.name)
        sink = None if topic is None else PartitionSink(self.writer, topic, self.partition)

        reason = None
        try:
            store = build_store(spec, path, sink)
        except StoreCorruptError as exc:
            # Invariant 4: unreadable local files are wiped and rebuilt from the changelog.
            reason = f"corrupt local state, wiped: {exc}"
            log.warning("task %s: %s", self.task_id, reason)
            shutil.rmtree(path, ignore_errors=True)
            store = build_store(spec, path, sink)
        self._slots[spec.name] = _StoreSlot(spec, store, topic)
        if topic is None:
            return None
        # In-memory stores always restore fully; that is normal and needs no reason.
        full = reason is not None or not spec.persistent
        if not full and store.read_metadata().changelog_offset is None:
            full, reason = True, "no local state"
        return RestoreJob(topic, self.partition, store, self.task_id, full=full, reason=reason)

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
            elif outcome.tail:
                # An attempt crashed before its markers: revert its records in the changelog
                # to the committed values, so a later full restore cannot pick them up.
                revert = [(k, store.committed_value(k)) for k, _ in outcome.tail]
                to_mark.append((outcome, [], revert))
                log.info(
                    "task %s: store %s: reverting %d uncommitted changelog records",
                    self.task_id,
                    store.name,
                    len(revert),
                )
        if not to_mark:
            return
        for outcome, _, revert in to_mark:
            for key, value in revert:
                self.writer.send(outcome.job.topic, self.partition, key, value)
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
                ),
            )
            for outcome, _, _ in to_mark
        ]
        offsets = self.writer.write_markers(markers, self.commit_timeout_s)
        for (outcome, apply, _), (topic, partition, marker) in zip(to_mark, markers, strict=True):
            meta = StoreMetadata(
                offsets[(topic, partition)], marker.batch_id, marker.source_offsets
            )
            outcome.job.store.restore_batch(apply, meta)
            outcome.last_marker, outcome.marker_offset = marker, meta.changelog_offset

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
        """Record that the stores now hold batch ``batch_id`` (committed by a later
        :func:`commit_together` with :meth:`pending_commit`)."""
        self._processed = StoreMetadata(None, batch_id, dict(source_offsets))
        self.uncommitted_batches += 1

    def pending_commit(self) -> tuple[int, dict[str, int]] | None:
        """``(batch_id, source_offsets)`` to commit, or None when nothing is uncommitted."""
        if self._processed is None or self._processed.batch_id is None:
            return None
        return self._processed.batch_id, dict(self._processed.source_offsets)

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

    # -- commit ----------------------------------------------------------------------------

    def _hook(self, step: CommitStep, batch_id: int) -> None:
        for hook in self.commit_hooks:
            hook(step, batch_id)

    def commit(self, batch_id: int, source_offsets: dict[str, int]) -> None:
        """Commit everything written since the last commit as batch ``batch_id``."""
        commit_together([(self, batch_id, source_offsets)])

    def _check_committable(self) -> None:
        if self._broken:
            raise StatekeeperError(
                f"task {self.task_id}: a previous commit failed; close() and open() the task "
                "to restore a consistent state before processing again"
            )

    def _markers(
        self, batch_id: int, source_offsets: dict[str, int]
    ) -> list[tuple[str, int, CommitMarker]]:
        return [
            (
                slot.topic,
                self.partition,
                CommitMarker(batch_id, self.task_id, slot.spec.name, dict(source_offsets)),
            )
            for slot in self._slots.values()
            if slot.topic is not None
        ]

    def _commit_stores(
        self, batch_id: int, source_offsets: dict[str, int], offsets: dict[tuple[str, int], int]
    ) -> None:
        for slot in self._slots.values():
            offset = offsets.get((slot.topic, self.partition)) if slot.topic else None
            slot.store.commit(StoreMetadata(offset, batch_id, dict(source_offsets)))
        self._hook("stores_committed", batch_id)
        self._metadata = StoreMetadata(None, batch_id, dict(source_offsets))
        self._processed, self.uncommitted_batches = None, 0  # every staged write is in
        self.last_commit_monotonic = time.monotonic()
        self._write_checkpoint()

    def _write_checkpoint(self) -> None:
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


def commit_together(parts: list[tuple[TaskStateManager, int, dict[str, int]]]) -> None:
    """Commit several tasks (``(state, batch_id, source_offsets)``) that share one changelog
    writer, each by the commit protocol in the module docstring, with one wait for all their
    changelog records and one round trip for all their markers. A task whose step failed is
    broken (close and reopen it); tasks whose stores were committed before stay committed.
    """
    if not parts:
        return
    writer = parts[0][0].writer
    markers = [m for state, batch_id, offsets in parts for m in state._markers(batch_id, offsets)]
    shared = all(state.writer is writer for state, _, _ in parts) and len(
        {(topic, partition) for topic, partition, _ in markers}
    ) == len(markers)
    if len(parts) > 1 and not shared:
        for part in parts:  # not one writer, or one changelog partition twice: one by one
            commit_together([part])
        return
    pending = [state for state, _, _ in parts]
    try:
        for state in pending:
            state._check_committable()
        for state in pending:
            for slot in state._slots.values():
                slot.store.flush()
        timeout_s = max(state.commit_timeout_s for state in pending)
        writer.flush(timeout_s)
        for state, batch_id, _ in parts:
            state._hook("changelog_produced", batch_id)
        marker_offsets = writer.write_markers(markers, timeout_s) if markers else {}
        for state, batch_id, _ in parts:
            state._hook("markers_written", batch_id)
        for state, batch_id, offsets in parts:
            state._commit_stores(batch_id, offsets, marker_offsets)
            pending.remove(state)
    except BaseException:
        for state in pending:
            state._broken = True
        raise
