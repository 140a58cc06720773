"""Decides, on the driver, what every stream task runs in a micro-batch (no Spark, no Kafka).

A task commits every ``commit_interval_ms`` rather than every batch, so between commits its
state lives only in the Spark worker that ran it. Spark, meanwhile, commits each batch as
soon as ``foreachBatch`` returns and never runs it again. The planner therefore keeps the
last ``max_uncommitted_batches`` batches (their time and each task's offset ranges) and what
each task last reported committed, and gives every task run:

- the task's ranges of this batch, grouped by task (one per subtopology and partition);
- its *backlog*: its batches in the history after its last reported commit, which a task
  whose worker lost them (killed, or handed the task over) replays oldest first with their
  own batch ids and times, so state and output dedupe ids come out the same;
- ``force_commit`` when the source is caught up (fewer records than admission control
  allows) or the task is *overdue*: its oldest uncommitted batch is about to leave the
  history, after which a replay could no longer find it. An overdue task without input gets
  a commit-only run (no ranges).

After a (re)start the history is seeded from Spark's offset log (:class:`BatchLog`), and
:meth:`BatchPlanner.runs_to_commit_held` gives the commit-only runs that leave every task
committed (at start: the batches a killed app's workers took with them; at stop: the
batches the workers still hold).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from statekeeper.kafka.model import OffsetRange
from statekeeper.processing.topology import task_id
from statekeeper.worker.task_run import BatchSlice, TaskRun, TaskRunResult


class BatchLog(Protocol):
    """What the planner reads of Spark's offset log and commit log."""

    def ranges(self, batch_id: int) -> list[OffsetRange] | None:
        """The batch's offset ranges, or None when the log cannot say (batch 0, a purged
        entry, a partition new in that batch)."""
        ...

    def batch_time_ms(self, batch_id: int) -> int:
        """The trigger time Spark logged for the batch (the same when it re-runs)."""
        ...

    def last_committed_batch(self) -> int | None:
        """The newest batch in Spark's commit log, if any."""
        ...


@dataclass(frozen=True)
class _LoggedBatch:
    batch_time_ms: int
    by_task: dict[str, tuple[OffsetRange, ...]]


class BatchPlanner:
    """Plans each micro-batch's task runs from the batch's ranges, a bounded history of
    recent batches and what each task last reported committed.

    ``subtopology_of`` maps a source topic to the subtopology reading it. A new version
    taking over (:mod:`statekeeper.app.takeover_start`) gives ``floor``, the first offset a
    subtopology processes of a partition (its ranges are cut below), and
    ``first_replayable``, its first batch id (replayable: its ranges are recorded), and
    ``fan_out``, for an old repartition topic whose state was re-keyed, the number of tasks
    each of its ranges goes to (every task of the subtopology). Only the last
    ``max_uncommitted_batches`` batches are kept, and one entry per task, so memory does not
    grow with the number of batches."""

    def __init__(
        self,
        log: BatchLog,
        *,
        subtopology_of: Callable[[str], int],
        max_uncommitted_batches: int,
        max_records_per_batch: int,
        floor: Callable[[int, str, int], int | None] | None = None,
        first_replayable: int = 1,
        fan_out: Callable[[str], int | None] | None = None,
    ) -> None:
        self._log = log
        self._subtopology_of = subtopology_of
        self._floor = floor
        self._fan_out = fan_out
        # Spark's offset log cannot say where its batch 0 started; a new version taking over
        # records its first batch's ranges itself, so it can replay it.
        self._first_replayable = first_replayable
        self._max_uncommitted = max_uncommitted_batches
        self._max_records = max_records_per_batch
        self._history: dict[int, _LoggedBatch] = {}
        self._seeded = False
        # Every task seen in a batch: its subtopology and partition.
        self._task_keys: dict[str, tuple[int, int]] = {}
        # The last batch each task reported committed.
        self._committed: dict[str, int] = {}

    # -- what the app calls --------------------------------------------------------------------

    def plan_batch(
        self, batch_id: int, ranges: list[OffsetRange], limit: int | None = None
    ) -> list[TaskRun]:
        """The task runs of batch ``batch_id``, whose offset ranges are ``ranges``: every task
        with input, and every overdue task (a commit-only run); then the batch joins the
        history. ``limit``: the records the source admitted this batch under (adaptive
        batches; default ``max_records_per_batch``). The first call after a start seeds the
        history first."""
        if not self._seeded:
            self.seed(batch_id)
        batch_time = self._log.batch_time_ms(batch_id)
        by_task = self._group_by_task(ranges)
        # Fewer records than admission control allows: the source is caught up, so the
        # tasks commit now rather than keep a backlog while there is little to do.
        caught_up = sum(r.count for r in ranges) < (limit or self._max_records)
        oldest_kept = batch_id - self._max_uncommitted + 1
        runs = []
        for tid, (sub, partition) in sorted(self._task_keys.items()):
            backlog = self._backlog(tid, batch_id)
            # A task commits before its oldest uncommitted batch leaves the history, idle
            # tasks too (with nothing to read), so a replay always finds its batches.
            overdue = bool(backlog) and backlog[0].batch_id <= oldest_kept
            if tid in by_task or overdue:
                runs.append(
                    TaskRun(
                        tid,
                        sub,
                        partition,
                        by_task.get(tid, ()),
                        batch_id,
                        batch_time,
                        backlog,
                        force_commit=caught_up or overdue,
                    )
                )
        self._remember(batch_id, batch_time, by_task)
        return runs

    def seed(self, before_batch_id: int) -> None:
        """After a (re)start, the batches before ``before_batch_id`` from Spark's offset log:
        tasks may hold them uncommitted, or have lost them with a killed worker."""
        self._seeded = True
        first = max(self._first_replayable, before_batch_id - self._max_uncommitted)
        for past in range(first, before_batch_id):
            ranges = self._log.ranges(past)
            if ranges is not None:
                self._remember(past, self._log.batch_time_ms(past), self._group_by_task(ranges))

    def seed_from_commit_log(self) -> bool:
        """At start, before the query: seed the history up to Spark's last committed batch
        (False, and nothing seeded, when Spark committed none)."""
        last = self._log.last_committed_batch()
        if last is None:
            return False
        self.seed(last + 1)
        return True

    def runs_to_commit_held(self) -> list[TaskRun]:
        """Commit-only runs (no ranges, ``force_commit``) of the newest batch in the history
        for every task with batches it has not reported committed: at stop the tasks commit
        what their workers hold; at start they replay and commit what a killed app's workers
        took with them (Spark never runs those batches again)."""
        tasks = [(tid, sub, p) for tid, (sub, p) in self._task_keys.items()]
        return [run for run in self.commit_only_runs(tasks) if run.backlog]

    def commit_only_runs(
        self, tasks: Iterable[tuple[str, int, int]], batch_id: int | None = None
    ) -> list[TaskRun]:
        """Commit-only runs (no ranges, ``force_commit``) for ``tasks`` (id, subtopology,
        partition) in batch ``batch_id`` (default: the newest in the history; none without
        a history), each with the backlog it has not reported committed: a snapshot reaches
        tasks without input in a batch, or an idle app."""
        if batch_id is None:
            if not self._history:
                return []
            batch_id = max(self._history)
        logged = self._history.get(batch_id)
        batch_time = logged.batch_time_ms if logged else self._log.batch_time_ms(batch_id)
        return [
            TaskRun(
                tid,
                sub,
                partition,
                ranges=(),
                batch_id=batch_id,
                batch_time_ms=batch_time,
                backlog=self._backlog(tid, batch_id + 1),
                force_commit=True,
            )
            for tid, sub, partition in sorted(tasks)
        ]

    def note_results(self, results: Iterable[TaskRunResult]) -> None:
        """Take in the last batch each task reports its state committed."""
        for result in results:
            if result.committed_batch_id is not None:
                self._committed[result.task_id] = result.committed_batch_id

    # -- read-only views (status, tests) -------------------------------------------------------

    @property
    def history_batch_ids(self) -> list[int]:
        """The batches kept for replays, oldest first (at most ``max_uncommitted_batches``)."""
        return sorted(self._history)

    @property
    def committed(self) -> dict[str, int]:
        """The last batch each task reported committed."""
        return dict(self._committed)

    # -- internals -----------------------------------------------------------------------------

    def _group_by_task(self, ranges: list[OffsetRange]) -> dict[str, tuple[OffsetRange, ...]]:
        by_task: dict[str, list[OffsetRange]] = defaultdict(list)
        for r in ranges:
            sub = self._subtopology_of(r.topic)
            floor = None if self._floor is None else self._floor(sub, r.topic, r.partition)
            if floor is not None and r.start < floor:
                if r.end <= floor:
                    continue
                r = OffsetRange(r.topic, r.partition, floor, r.end)
            width = None if self._fan_out is None else self._fan_out(r.topic)
            for partition in (r.partition,) if width is None else range(width):
                tid = task_id(sub, partition)
                self._task_keys[tid] = (sub, partition)
                by_task[tid].append(r)
        return {tid: tuple(sorted(rs, key=lambda r: r.topic)) for tid, rs in by_task.items()}

    def _remember(
        self, batch_id: int, batch_time: int, by_task: dict[str, tuple[OffsetRange, ...]]
    ) -> None:
        self._history[batch_id] = _LoggedBatch(batch_time, by_task)
        for old in sorted(self._history)[: -self._max_uncommitted]:
            del self._history[old]

    def _backlog(self, tid: str, batch_id: int) -> tuple[BatchSlice, ...]:
        """The task's batches before ``batch_id`` that it has not reported committed."""
        since = self._committed.get(tid, -1)
        return tuple(
            BatchSlice(past, logged.batch_time_ms, logged.by_task[tid])
            for past, logged in sorted(self._history.items())
            if since < past < batch_id and tid in logged.by_task
        )
