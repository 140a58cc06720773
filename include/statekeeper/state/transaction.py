"""Where a micro-batch is committed: :class:`TaskTransaction`, one task's commit start to end.

Nothing else commits a task's state; :func:`commit_group` commits several tasks that share
one changelog writer at once. A transaction moves through these states, in order, each
named after the step just done (invariants 1-3, docs/invariants.md):

  ``OPEN``       created for a batch id and its source offsets; nothing done yet
  ``FLUSHED``    every store's record cache flushed: each dirty key went to the changelog
                 producer as an absolute value
  ``PRODUCED``   the broker acknowledged every changelog record and every output record
  ``MARKED``     one commit marker per changelog partition (batch id + source offsets),
                 acknowledged
  ``STORED``     each store wrote its staged data and its metadata (marker offset, source
                 offsets, batch id) in one RocksDB write
  ``COMMITTED``  the human-readable ``.checkpoint`` file rewritten; the after-commit hooks
                 run next (the place snapshots are taken)
  ``FAILED``     a step raised: the task is broken and must be closed and reopened, which
                 restores a consistent state

What the next open finds after a crash (:meth:`TaskStateManager.open` decides from the
changelog): before ``MARKED`` no marker of the batch exists, so its changelog records are an
uncommitted tail that the open reverts, and the state is the last commit's. From the first
marker on (a crash in the middle of writing them included) the open rolls every store
forward to the new batch, because ``PRODUCED`` proved all its records were acknowledged. A
store written in ``STORED`` already holds the new batch. Either way the state is exactly one
of the two batches, never a mix.

Step hooks (``TaskStateManager.commit_hooks``, ``hook(state, batch_id)``) run right after a
transaction enters each state from ``FLUSHED`` to ``COMMITTED``; one that raises fails the
transaction there, which is how tests inject a crash between two steps. After-commit hooks
(:meth:`TaskStateManager.add_after_commit_hook`) run once per successful commit with a
:class:`CommittedBatch`; one that raises is logged and does not undo the commit.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from statekeeper.changelog.records import CommitMarker
from statekeeper.changelog.writer import PartitionSink
from statekeeper.errors import StatekeeperError
from statekeeper.stores.base import StoreMetadata

if TYPE_CHECKING:
    from statekeeper.state.task_state_manager import TaskStateManager

log = logging.getLogger("statekeeper.state")


class TransactionState(enum.StrEnum):
    """Where a :class:`TaskTransaction` stands: the last commit step it completed."""

    OPEN = "open"
    FLUSHED = "flushed"
    PRODUCED = "produced"
    MARKED = "marked"
    STORED = "stored"
    COMMITTED = "committed"
    FAILED = "failed"


#: The states a transaction passes through on success, in order (step hooks run on each).
COMMIT_STEPS: tuple[TransactionState, ...] = (
    TransactionState.FLUSHED,
    TransactionState.PRODUCED,
    TransactionState.MARKED,
    TransactionState.STORED,
    TransactionState.COMMITTED,
)

StepHook = Callable[[TransactionState, int], None]


@dataclass(frozen=True)
class CommittedBatch:
    """What an after-commit hook gets: enough to take a snapshot at this commit boundary."""

    task_id: str
    batch_id: int
    source_offsets: dict[str, int]
    #: store name -> offset of this commit's marker in the store's changelog partition
    #: (stores with logging disabled have none)
    marker_offsets: dict[str, int]
    changelog_topics: dict[str, str]  # store name -> changelog topic (logged stores)
    task_dir: Path  # the stores' files live below it


AfterCommitHook = Callable[[CommittedBatch], None]


class OutputFlusher(Protocol):
    """Anything whose sent records a commit waits for (an output producer)."""

    def flush(self, timeout_s: float) -> None: ...


class TaskTransaction:
    """Commits everything a task's stores hold since its last commit as one batch.

    Create one per commit (``TaskStateManager.pending_transaction()`` for the batches the
    task processed, or ``TaskTransaction(state, batch_id, source_offsets)``) and call
    :meth:`commit` once; see the module docstring for its states.
    """

    def __init__(
        self, task: TaskStateManager, batch_id: int, source_offsets: dict[str, int]
    ) -> None:
        self.task = task
        self.batch_id = batch_id
        self.source_offsets = dict(source_offsets)
        self._state = TransactionState.OPEN
        self._marker_offsets: dict[str, int] = {}  # store name -> its marker's offset

    @property
    def state(self) -> TransactionState:
        return self._state

    def commit(self, outputs: Sequence[OutputFlusher] = ()) -> None:
        """Run every commit step, waiting for ``outputs`` alongside the changelog records.

        Raises what a step raised (the task is then broken: close and reopen it), or
        :class:`StatekeeperError` when this transaction is not ``OPEN`` or the task is broken.
        """
        commit_group([self], outputs)

    def __repr__(self) -> str:
        return f"TaskTransaction({self.task.task_id}, batch {self.batch_id}, {self._state})"

    # -- steps, driven by commit_group -----------------------------------------------------

    def _check_open(self) -> None:
        if self._state is not TransactionState.OPEN:
            raise StatekeeperError(
                f"task {self.task.task_id}: the transaction of batch {self.batch_id} is "
                f"{self._state}; a transaction commits once, start a new one"
            )
        if self.task.broken:
            raise StatekeeperError(
                f"task {self.task.task_id}: a previous commit failed; close() and open() the "
                "task to restore a consistent state before processing again"
            )

    def _enter(self, state: TransactionState) -> None:
        """Record that the step before ``state`` is done, then run the step hooks."""
        self._state = state
        for hook in self.task.commit_hooks:
            hook(state, self.batch_id)

    def _fail(self) -> None:
        self._state = TransactionState.FAILED
        self.task.broken = True

    def _flush_caches(self) -> None:
        for slot in self.task.slots:
            slot.store.flush()

    def _markers(self) -> list[tuple[str, int, CommitMarker]]:
        task = self.task
        return [
            (
                slot.topic,
                task.partition,
                CommitMarker(
                    self.batch_id, task.task_id, slot.spec.name, self.source_offsets, task.epoch
                ),
            )
            for slot in task.slots
            if slot.topic is not None
        ]

    def _write_stores(self, marker_offsets: dict[tuple[str, int], int]) -> None:
        """Each store's staged writes and metadata in one write (invariant 3)."""
        task = self.task
        for slot in task.slots:
            offset = marker_offsets.get((slot.topic, task.partition)) if slot.topic else None
            if offset is not None:
                self._marker_offsets[slot.spec.name] = offset
            slot.store.commit(
                StoreMetadata(
                    offset,
                    self.batch_id,
                    dict(self.source_offsets),
                    task.epoch,
                    task.verified_offset(slot.spec.name),
                )
            )
        task.advance_committed(self.batch_id, self.source_offsets)

    def _committed_batch(self) -> CommittedBatch:
        task = self.task
        return CommittedBatch(
            task_id=task.task_id,
            batch_id=self.batch_id,
            source_offsets=dict(self.source_offsets),
            marker_offsets=dict(self._marker_offsets),
            changelog_topics={slot.spec.name: slot.topic for slot in task.slots if slot.topic},
            task_dir=task.task_dir.path,
        )

    def _after_commit(self) -> None:
        batch = self._committed_batch()
        for hook in self.task.after_commit_hooks:
            try:
                hook(batch)
            except Exception:  # the commit stands; a hook (a snapshot) may try again next time
                log.exception(
                    "task %s: after-commit hook %r failed for batch %d",
                    self.task.task_id,
                    hook,
                    self.batch_id,
                )


def commit_group(
    transactions: Sequence[TaskTransaction], outputs: Sequence[OutputFlusher] = ()
) -> None:
    """Commit several tasks' transactions that share one changelog writer: one wait for all
    their changelog records and ``outputs``, one round trip for all their markers, then each
    task's store write (see the module docstring for the steps).

    Transactions whose tasks use different writers, or that write one changelog partition
    twice, are committed one by one instead. When a step fails, every transaction not yet
    ``COMMITTED`` fails (its task is broken: close and reopen it), the ones committed before
    stay committed and still run their after-commit hooks, and the error is raised.
    """
    if not transactions:
        return
    for transaction in transactions:
        transaction._check_open()
    writer = transactions[0].task.writer
    markers = [m for t in transactions for m in t._markers()]
    shared = all(t.task.writer is writer for t in transactions) and len(
        {(topic, partition) for topic, partition, _ in markers}
    ) == len(markers)
    if len(transactions) > 1 and not shared:
        for transaction in transactions:
            transaction.commit(outputs)
        return

    timeout_s = max(t.task.commit_timeout_s for t in transactions)
    committed: list[TaskTransaction] = []
    try:
        try:
            for transaction in transactions:
                transaction._flush_caches()
            _enter_all(transactions, TransactionState.FLUSHED)
            for output in outputs:
                output.flush(timeout_s)
            writer.flush(timeout_s)
            _enter_all(transactions, TransactionState.PRODUCED)
            for transaction in transactions:  # a task frozen until now may be fenced
                transaction.task.check_still_owner()
            if _relog(transactions, timeout_s):
                writer.flush(timeout_s)
            marker_offsets = writer.write_markers(markers, timeout_s) if markers else {}
            for transaction in transactions:
                transaction.task.note_committed()
            _enter_all(transactions, TransactionState.MARKED)
            for transaction in transactions:
                # Frozen while writing markers? Then the store must not take the batch.
                transaction.task.check_still_owner()
                transaction._write_stores(marker_offsets)
                transaction._enter(TransactionState.STORED)
                transaction.task.write_checkpoint_file()
                transaction._enter(TransactionState.COMMITTED)
                committed.append(transaction)
        except BaseException:
            for transaction in transactions:
                if transaction not in committed:
                    transaction._fail()
            raise
    finally:
        # Only here do after-commit hooks run, and only for tasks whose commit completed.
        for transaction in committed:
            transaction._after_commit()


def _relog(transactions: Sequence[TaskTransaction], timeout_s: float) -> bool:
    """Log again, under each task's epoch, the keys a fenced writer wrote after the task
    opened (:meth:`TaskStateManager.take_relog`); True if anything was sent."""
    sent = False
    for transaction in transactions:
        task = transaction.task
        for topic, records in task.take_relog():
            PartitionSink(task.writer, topic, task.partition, task.epoch).send_all(records)
            log.info(
                "task %s: %d key(s) a fenced writer wrote to %s logged again with this "
                "copy's values",
                task.task_id,
                len(records),
                topic,
            )
            sent = True
    return sent


def _enter_all(transactions: Sequence[TaskTransaction], state: TransactionState) -> None:
    for transaction in transactions:
        transaction._enter(state)
