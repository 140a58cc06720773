"""BatchPlanner under random kill points (Hypothesis): a simulated app whose tasks commit
every few batches, whose workers are killed at random (dropping the batches they hold
uncommitted), and whose driver is killed at random (a new planner seeded from the offset
log, every commit report lost). With the planner's runs, every task's state must end up
having applied every batch's ranges exactly once, in order, with each batch's own id and
time, and a replay must never miss a batch ("not in the backlog").

The simulated worker follows the task runner's rules (worker/task_runner.py: replay the
backlog batches the state is behind on, the gap check, skip what the state holds, commit
when forced or due) and the state's (state/task_state_manager.py: ``commit_due``,
``pending_commit``): records are offsets, a state is the list of records it applied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from statekeeper.app.batch_planner import BatchPlanner
from statekeeper.kafka.model import OffsetRange, tp_key
from statekeeper.worker.task_run import TaskRun, TaskRunResult

from .batch_log_fake import SUBTOPOLOGY, MemoryBatchLog

PARTITIONS = 2
MAX_BATCH_PASSES = 3  # as the app: then the batch fails, and with it the app
#: Whether a task's commit interval has passed when it runs (mostly not: batches pile up).
INTERVAL_ELAPSED = st.sampled_from([False, False, False, True])
TOPIC_PARTITIONS = [(topic, p) for topic in sorted(SUBTOPOLOGY) for p in range(PARTITIONS)]

#: One applied record: (offset, batch id, batch time) — a replay must repeat the batch's own
#: id and time, or outputs would get other dedupe ids and punctuation other times.
Record = tuple[int, int, int]


class MissedBatch(AssertionError):
    """A task's state stops short of a batch's ranges: the batches between were not in the
    backlog (the task runner raises the same, see its ``_check_no_gap``)."""


@dataclass
class State:
    """A task's stores: what they applied, per ``topic:partition``, and the offsets marker."""

    applied: dict[str, list[Record]] = field(default_factory=dict)
    offsets: dict[str, int] = field(default_factory=dict)  # next offset to process
    batch_id: int | None = None  # of the last mark (live) or commit (durable)

    def copy(self) -> State:
        return State(
            {k: list(v) for k, v in self.applied.items()}, dict(self.offsets), self.batch_id
        )


@dataclass
class SimTask:
    """One stream task: its committed state (on disk and in the changelog) and, while a
    worker holds it open, its live state with the uncommitted batches."""

    committed: State = field(default_factory=State)
    live: State | None = None
    uncommitted_batches: int = 0
    never_committed: bool = True

    def open(self) -> State:
        if self.live is None:  # a cold open restores the committed state
            self.live = self.committed.copy()
            self.uncommitted_batches = 0
        return self.live

    def kill(self) -> None:
        self.live = None
        self.uncommitted_batches = 0

    @property
    def has_uncommitted(self) -> bool:
        return self.uncommitted_batches > 0

    def mark_processed(self, batch_id: int) -> None:
        assert self.live is not None
        self.live.batch_id = batch_id
        self.uncommitted_batches += 1

    def commit_due(self, interval_elapsed: bool, max_batches: int) -> bool:
        if not self.has_uncommitted:
            return False
        assert self.live is not None
        return (
            self.never_committed
            or not self.live.offsets.keys() <= self.committed.offsets.keys()
            or self.uncommitted_batches >= max_batches
            or interval_elapsed
        )

    def commit(self) -> None:
        if self.has_uncommitted:
            assert self.live is not None
            self.committed = self.live.copy()
            self.uncommitted_batches = 0
            self.never_committed = False


def _check_no_gap(batch_id: int, ranges: tuple[OffsetRange, ...], offsets: dict[str, int]) -> None:
    for r in ranges:
        done = offsets.get(tp_key(r.topic, r.partition))
        if done is not None and done < r.start:
            raise MissedBatch(
                f"state at {done} of {r.topic}[{r.partition}], batch {batch_id} "
                f"starts at {r.start}: the batches between are not in the backlog"
            )


def _apply(state: State, ranges: tuple[OffsetRange, ...], batch_id: int, time_ms: int) -> None:
    """Process a batch's ranges, skipping records below the processed offsets."""
    before = dict(state.offsets)
    for r in ranges:
        key = tp_key(r.topic, r.partition)
        first = max(r.start, before.get(key, r.start))
        state.applied.setdefault(key, []).extend(
            (o, batch_id, time_ms) for o in range(first, r.end)
        )
        state.offsets[key] = max(before.get(key, 0), r.end)


def run_task(
    task: SimTask, run: TaskRun, interval_elapsed: bool, max_batches: int
) -> TaskRunResult:
    """The task runner's work for one run: replay, process, commit if forced or due."""
    state = task.open()
    for past in sorted(run.backlog, key=lambda b: b.batch_id):
        offsets = state.offsets
        if not any(
            (done := offsets.get(tp_key(r.topic, r.partition))) is not None and done < r.end
            for r in past.ranges
        ):
            continue
        _check_no_gap(past.batch_id, past.ranges, offsets)
        event("a task replayed a batch its worker had lost")
        _apply(state, past.ranges, past.batch_id, past.batch_time_ms)
        task.mark_processed(past.batch_id)
    _check_no_gap(run.batch_id, run.ranges, state.offsets)
    if not all(state.offsets.get(tp_key(r.topic, r.partition), 0) >= r.end for r in run.ranges):
        _apply(state, run.ranges, run.batch_id, run.batch_time_ms)
        task.mark_processed(run.batch_id)
    if not run.ranges:
        event("a commit-only run")
    if run.force_commit or task.commit_due(interval_elapsed, max_batches):
        task.commit()
    return TaskRunResult(
        run.task_id,
        run.batch_id,
        committed=not task.has_uncommitted,
        committed_batch_id=task.committed.batch_id,
    )


class DriverKilled(Exception):
    """The app process died: its workers with it, Spark's batch stays uncommitted."""


@dataclass
class SimApp:
    """Spark (offset and commit log), the driver with its planner, and the tasks."""

    data: st.DataObject
    max_uncommitted: int
    max_records: int
    log: MemoryBatchLog = field(default_factory=MemoryBatchLog)
    ends: dict[tuple[str, int], int] = field(default_factory=dict)  # logged end offsets
    tasks: dict[str, SimTask] = field(default_factory=dict)
    planner: BatchPlanner | None = None
    chaos: bool = True  # whether anything gets killed

    def draw(self, strategy: st.SearchStrategy, label: str):  # noqa: ANN201 (any drawn value)
        return self.data.draw(strategy, label=label)

    def task(self, task_id: str) -> SimTask:
        return self.tasks.setdefault(task_id, SimTask())

    # -- the driver ------------------------------------------------------------------------

    def start(self) -> None:
        """StatekeeperApp.run(): a new planner; replay what a killed app held, then query."""
        self.planner = BatchPlanner(
            self.log,
            subtopology_of=SUBTOPOLOGY.__getitem__,
            max_uncommitted_batches=self.max_uncommitted,
            max_records_per_batch=self.max_records,
        )
        if self.planner.seed_from_commit_log():
            self.execute(self.planner.runs_to_commit_held())

    def stop(self) -> None:
        """A graceful stop: the tasks commit what they hold; the workers then exit."""
        assert self.planner is not None
        self.execute(self.planner.runs_to_commit_held())
        self.kill_driver_now()

    def kill_driver_now(self) -> None:
        event("the app exited (killed or stopped)")
        for task in self.tasks.values():
            task.kill()
        self.planner = None

    def next_batch(self) -> tuple[int, list[OffsetRange]]:
        """Spark's next batch: the logged one it has not committed (same ranges), else a new
        one from fresh input, logged before it runs."""
        last_logged = max(self.log.logged, default=-1)
        if last_logged > max(self.log.commits, default=-1):
            return last_logged, self.log.logged[last_logged]
        batch_id = last_logged + 1
        ranges = []
        for tp in TOPIC_PARTITIONS:
            count = self.draw(st.sampled_from([0, 0, 1, 2, 3]), f"records {tp} in {batch_id}")
            start = self.ends.get(tp, 0)
            if count:
                ranges.append(OffsetRange(tp[0], tp[1], start, start + count))
                self.ends[tp] = start + count
        self.log.log(batch_id, ranges)
        return batch_id, ranges

    def run_batch(self) -> None:
        """foreachBatch: plan, run on the workers, note the results; then Spark commits."""
        assert self.planner is not None
        batch_id, ranges = self.next_batch()
        self.execute(self.planner.plan_batch(batch_id, ranges))
        self.log.commit(batch_id)

    def execute(self, runs: list[TaskRun]) -> None:
        """The app's passes over a batch's runs. A worker killed mid-batch loses its tasks'
        uncommitted batches and the results it had not returned; Spark runs those tasks again
        in the next pass. A driver killed mid-batch ends the app."""
        assert self.planner is not None
        todo = list(runs)
        for _ in range(MAX_BATCH_PASSES):
            if not todo:
                return
            results: list[TaskRunResult] = []
            kill_at = self.draw(st.integers(-1, len(todo)), "kill point") if self.chaos else -1
            kill_driver = kill_at >= 0 and self.draw(st.booleans(), "the driver is killed")
            for index, run in enumerate(todo):
                if index == kill_at:
                    if kill_driver:
                        self.kill_driver_now()
                        raise DriverKilled
                    self.kill_workers(results)
                elapsed = self.draw(INTERVAL_ELAPSED, "commit interval elapsed")
                results.append(run_task(self.task(run.task_id), run, elapsed, self.max_uncommitted))
            if kill_at == len(todo):
                if kill_driver:
                    self.kill_driver_now()
                    raise DriverKilled
                self.kill_workers(results)
            self.planner.note_results(results)
            reported = {r.task_id for r in results}
            todo = [run for run in todo if run.task_id not in reported]
        if todo:  # the batch failed: so does the query, and the app exits
            self.kill_driver_now()
            raise DriverKilled

    def kill_workers(self, results: list[TaskRunResult]) -> None:
        """Kill the workers holding some tasks; results they had not returned are lost."""
        victims = self.draw(st.sets(st.sampled_from(sorted(self.tasks) or ["none"])), "killed")
        for task_id in victims & self.tasks.keys():
            self.tasks[task_id].kill()
        results[:] = [r for r in results if r.task_id not in victims]

    # -- checks ----------------------------------------------------------------------------

    def expected(self) -> dict[str, list[Record]]:
        """Every logged batch's records per ``topic:partition``, with the batch's id and time."""
        out: dict[str, list[Record]] = {}
        for batch_id in sorted(self.log.logged):
            for r in self.log.logged[batch_id]:
                out.setdefault(tp_key(r.topic, r.partition), []).extend(
                    (o, batch_id, self.log.batch_time_ms(batch_id)) for o in range(r.start, r.end)
                )
        return out

    def check_prefixes(self) -> None:
        """Whatever a state holds is a prefix of the log: no gap, no duplicate, in order."""
        expected = self.expected()
        for task in self.tasks.values():
            for state in (task.committed, task.live):
                for key, applied in (state.applied if state else {}).items():
                    assert applied == expected[key][: len(applied)], key


@settings(
    max_examples=500,
    deadline=None,
    database=None,  # no example files written into the repository
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_every_batch_is_applied_exactly_once_whatever_is_killed(data: st.DataObject) -> None:
    app = SimApp(
        data,
        max_uncommitted=data.draw(st.integers(1, 4), label="max_uncommitted_batches"),
        max_records=data.draw(st.integers(1, 10), label="max_records_per_batch"),
    )
    steps = data.draw(
        st.lists(
            st.sampled_from(["batch"] * 6 + ["kill workers", "kill driver", "stop"]),
            min_size=1,
            max_size=40,
        ),
        label="steps",
    )
    for step in steps:
        try:
            if app.planner is None:
                app.start()
            if step == "batch":
                app.run_batch()
            elif step == "kill workers":
                app.kill_workers([])
            elif step == "kill driver":
                app.kill_driver_now()
            else:
                app.stop()
        except DriverKilled:
            pass
        app.check_prefixes()
    # Finally a run that is not killed: it finishes Spark's pending batch and stops.
    app.chaos = False
    if app.planner is None:
        app.start()
    if max(app.log.logged, default=-1) > max(app.log.commits, default=-1):
        app.run_batch()
    app.stop()
    expected = app.expected()
    for task_id, task in app.tasks.items():
        assert task.live is None
        for key, applied in task.committed.applied.items():
            assert applied == expected[key], (task_id, key)
    reads = {key for task in app.tasks.values() for key in task.committed.applied}
    assert reads == {key for key, records in expected.items() if records}
