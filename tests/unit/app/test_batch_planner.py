"""BatchPlanner, case by case: what each task runs in a micro-batch (ranges, backlog to
replay, whether it must commit), seeding after a restart, and the commit-only runs at start
and stop. Pure: an in-memory offset/commit log, no Spark, no broker."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from statekeeper.app.batch_planner import BatchPlanner
from statekeeper.kafka.model import OffsetRange
from statekeeper.state.task_id import TaskId
from statekeeper.worker.task_run import BatchSlice, TaskRun, TaskRunResult

from .batch_log_fake import SUBTOPOLOGY, MemoryBatchLog, batch_time

MAX_UNCOMMITTED = 3
MAX_RECORDS = 10  # a batch of fewer records means the source is caught up


def ranges(spec: str) -> tuple[OffsetRange, ...]:
    """``"a/0:0-5 b/1:3-4"`` -> offset ranges (topic/partition:start-end)."""
    out = []
    for part in spec.split():
        tp, offsets = part.split(":")
        topic, partition = tp.split("/")
        start, end = offsets.split("-")
        out.append(OffsetRange(topic, int(partition), int(start), int(end)))
    return tuple(out)


def make_planner(log: MemoryBatchLog | None = None) -> BatchPlanner:
    return BatchPlanner(
        log or MemoryBatchLog(),
        subtopology_of=SUBTOPOLOGY.__getitem__,
        max_uncommitted_batches=MAX_UNCOMMITTED,
        max_records_per_batch=MAX_RECORDS,
    )


def committed(task_id: str, batch_id: int | None) -> TaskRunResult:
    return TaskRunResult(task_id, batch_id or 0, committed=True, committed_batch_id=batch_id)


@dataclass(frozen=True)
class Run:
    """An expected task run; subtopology and partition come from the task id."""

    task_id: str
    ranges: str
    batch_id: int
    backlog: tuple[tuple[int, str], ...] = ()
    force: bool = False

    def as_task_run(self) -> TaskRun:
        tid = TaskId.parse(self.task_id)
        sub, partition = tid.subtopology, tid.partition
        return TaskRun(
            self.task_id,
            sub,
            partition,
            ranges(self.ranges),
            self.batch_id,
            batch_time(self.batch_id),
            tuple(BatchSlice(b, batch_time(b), ranges(spec)) for b, spec in self.backlog),
            force_commit=self.force,
        )


@dataclass(frozen=True)
class Case:
    name: str
    before: list[tuple[int, str]]  # batches planned earlier: (batch id, ranges)
    committed: dict[str, int]  # what the tasks then reported committed
    batch: tuple[int, str]  # the batch planned now
    expected: list[Run] = field(default_factory=list)


FULL = "a/0:0-6 a/1:0-6"  # 12 records: admission control's limit reached, not caught up

CASES = [
    Case(
        "first batch, caught up: every task with input runs and commits",
        before=[],
        committed={},
        batch=(0, "a/0:0-5 a/1:0-3"),
        expected=[
            Run("0_0", "a/0:0-5", 0, force=True),
            Run("0_1", "a/1:0-3", 0, force=True),
        ],
    ),
    Case(
        "first batch under backlog: the commit interval decides",
        before=[],
        committed={},
        batch=(0, FULL),
        expected=[Run("0_0", "a/0:0-6", 0), Run("0_1", "a/1:0-6", 0)],
    ),
    Case(
        "a caught-up batch forces a commit; a task without input does not run",
        before=[(0, FULL)],
        committed={"0_0": 0, "0_1": 0},
        batch=(1, "a/0:6-8"),
        expected=[Run("0_0", "a/0:6-8", 1, force=True)],
    ),
    Case(
        "backlog under the commit interval: the uncommitted batch rides along",
        before=[(0, FULL), (1, "a/0:6-12 a/1:6-12")],
        committed={"0_0": 0, "0_1": 0},
        batch=(2, "a/0:12-18 a/1:12-18"),
        expected=[
            Run("0_0", "a/0:12-18", 2, backlog=((1, "a/0:6-12"),)),
            Run("0_1", "a/1:12-18", 2, backlog=((1, "a/1:6-12"),)),
        ],
    ),
    Case(
        "a task holding a batch that is not yet the oldest kept is left alone without input",
        before=[(0, FULL), (1, "a/0:6-12 a/1:6-12")],
        committed={"0_0": 1, "0_1": 0},
        batch=(2, "a/0:12-22"),
        expected=[Run("0_0", "a/0:12-22", 2)],
    ),
    Case(
        "overdue without input: a commit-only run before its batch leaves the history",
        before=[(0, FULL), (1, "a/0:6-12 a/1:6-12"), (2, "a/0:12-22")],
        committed={"0_0": 2, "0_1": 0},
        batch=(3, "a/0:22-32"),
        expected=[
            Run("0_0", "a/0:22-32", 3),
            Run("0_1", "", 3, backlog=((1, "a/1:6-12"),), force=True),
        ],
    ),
    Case(
        "overdue with input: runs its ranges and must commit",
        before=[(0, FULL), (1, "a/0:6-12 a/1:6-12"), (2, "a/0:12-22")],
        committed={"0_0": 2, "0_1": 0},
        batch=(3, "a/0:22-32 a/1:12-14"),
        expected=[
            Run("0_0", "a/0:22-32", 3),
            Run("0_1", "a/1:12-14", 3, backlog=((1, "a/1:6-12"),), force=True),
        ],
    ),
    Case(
        "a task whose worker lost its uncommitted batches gets them oldest first, own ids",
        before=[(0, "a/0:0-10"), (1, "a/0:10-20"), (2, "a/0:20-30 b/0:0-5"), (3, "a/0:30-40")],
        committed={"0_0": 1, "1_0": 2},
        batch=(4, "a/0:40-50"),
        expected=[
            Run(
                "0_0",
                "a/0:40-50",
                4,
                backlog=((2, "a/0:20-30"), (3, "a/0:30-40")),
                force=True,  # batch 2 is the oldest kept: overdue
            )
        ],
    ),
    Case(
        "tasks of several subtopologies; one task's topics sorted by name",
        before=[],
        committed={},
        batch=(0, "b/1:0-2 a2/0:0-3 a/0:0-4"),
        expected=[
            Run("0_0", "a/0:0-4 a2/0:0-3", 0, force=True),
            Run("1_1", "b/1:0-2", 0, force=True),
        ],
    ),
    Case(
        "a task of another subtopology keeps its own backlog",
        before=[(0, "a/0:0-6 b/0:0-6"), (1, "a/0:6-12 b/0:6-12")],
        committed={"0_0": 1, "1_0": 0},
        batch=(2, "a/0:12-16 b/0:12-18"),
        expected=[
            Run("0_0", "a/0:12-16", 2),
            Run("1_0", "b/0:12-18", 2, backlog=((1, "b/0:6-12"),)),
        ],
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_plan_batch(case: Case) -> None:
    planner = make_planner()
    for batch_id, spec in case.before:
        planner.plan_batch(batch_id, list(ranges(spec)))
    planner.note_results([committed(t, b) for t, b in case.committed.items()])
    batch_id, spec = case.batch
    assert planner.plan_batch(batch_id, list(ranges(spec))) == [
        run.as_task_run() for run in case.expected
    ]


def test_a_task_reporting_no_commit_keeps_its_backlog() -> None:
    planner = make_planner()
    planner.plan_batch(0, list(ranges(FULL)))
    planner.plan_batch(1, list(ranges("a/0:6-12 a/1:6-12")))
    planner.note_results([committed("0_0", None), committed("0_1", 1)])
    assert planner.committed == {"0_1": 1}
    runs = planner.plan_batch(2, list(ranges("a/0:12-18 a/1:12-18")))
    assert [[b.batch_id for b in r.backlog] for r in runs] == [[0, 1], []]


def test_the_history_keeps_only_the_last_max_uncommitted_batches() -> None:
    planner = make_planner()
    for batch_id in range(50):
        planner.plan_batch(batch_id, list(ranges(f"a/0:{batch_id}-{batch_id + 1}")))
        assert len(planner.history_batch_ids) <= MAX_UNCOMMITTED
    assert planner.history_batch_ids == [47, 48, 49]


# -- after a restart: seeding from Spark's offset log ---------------------------------------


def spark_log(batches: dict[int, str], committed_up_to: int | None) -> MemoryBatchLog:
    log = MemoryBatchLog()
    for batch_id, spec in batches.items():
        log.log(batch_id, list(ranges(spec)))
    if committed_up_to is not None:
        for batch_id in range(committed_up_to + 1):
            log.commit(batch_id)
    return log


LOGGED = {
    0: "a/0:0-6 a/1:0-6",
    1: "a/0:6-12 a/1:6-12",
    2: "a/0:12-18",
    3: "a/0:18-24 b/0:0-6",
    4: "a/1:12-20",
    5: "b/0:6-15",
}


def test_the_first_batch_after_a_restart_seeds_the_history_from_the_offset_log() -> None:
    log = spark_log(LOGGED, committed_up_to=5)
    planner = make_planner(log)
    runs = planner.plan_batch(6, list(ranges("a/0:24-30 a/1:20-26")))
    assert log.reads == [3, 4, 5]  # the last max_uncommitted_batches before batch 6
    # Nothing is known committed: every task carries its logged batches, and the tasks
    # holding batch 3 or 4 (gone from the history within a batch) must commit now.
    assert runs == [
        Run("0_0", "a/0:24-30", 6, backlog=((3, "a/0:18-24"),), force=True).as_task_run(),
        Run("0_1", "a/1:20-26", 6, backlog=((4, "a/1:12-20"),), force=True).as_task_run(),
        Run("1_0", "", 6, backlog=((3, "b/0:0-6"), (5, "b/0:6-15")), force=True).as_task_run(),
    ]
    assert planner.history_batch_ids == [4, 5, 6]


def test_seeding_skips_what_the_log_cannot_give_and_never_reads_batch_0() -> None:
    log = spark_log({2: "a/0:12-18"}, committed_up_to=2)  # batch 1's entry is gone
    planner = make_planner(log)
    planner.plan_batch(3, list(ranges("a/0:18-24")))
    assert log.reads == [1, 2]
    assert planner.history_batch_ids == [2, 3]


def test_runs_to_commit_held_at_start_replay_what_a_killed_app_held() -> None:
    log = spark_log(LOGGED, committed_up_to=4)  # batch 5 logged, not committed: it re-runs
    planner = make_planner(log)
    assert planner.seed_from_commit_log()
    assert log.reads == [2, 3, 4]
    runs = planner.runs_to_commit_held()
    # Commit-only runs of the last committed batch (its time), one per task with batches.
    assert runs == [
        Run("0_0", "", 4, backlog=((2, "a/0:12-18"), (3, "a/0:18-24")), force=True).as_task_run(),
        Run("0_1", "", 4, backlog=((4, "a/1:12-20"),), force=True).as_task_run(),
        Run("1_0", "", 4, backlog=((3, "b/0:0-6"),), force=True).as_task_run(),
    ]
    planner.note_results([committed("0_0", 3), committed("0_1", 4), committed("1_0", 3)])
    assert planner.runs_to_commit_held() == []
    # Spark re-runs batch 5 next; the history is not seeded again.
    runs = planner.plan_batch(5, list(ranges(LOGGED[5])))
    assert log.reads == [2, 3, 4]
    assert runs == [Run("1_0", "b/0:6-15", 5, force=True).as_task_run()]  # caught up


def test_without_a_commit_log_nothing_is_seeded_or_replayed() -> None:
    log = spark_log({}, committed_up_to=None)
    planner = make_planner(log)
    assert not planner.seed_from_commit_log()
    assert planner.runs_to_commit_held() == []
    planner.plan_batch(0, list(ranges("a/0:0-5")))  # the first batch seeds (nothing before 0)
    assert log.reads == []


def test_runs_to_commit_held_at_stop_cover_only_tasks_with_unreported_batches() -> None:
    planner = make_planner()
    planner.plan_batch(0, list(ranges("a/0:0-6 a/1:0-6 b/0:0-2")))
    planner.note_results([committed("0_0", 0), committed("0_1", 0), committed("1_0", 0)])
    planner.plan_batch(1, list(ranges("a/0:6-12 a/1:6-12")))
    planner.plan_batch(2, list(ranges("a/0:12-22")))
    planner.note_results([committed("0_0", 2)])  # 0_1 still holds batch 1
    assert planner.runs_to_commit_held() == [
        Run("0_1", "", 2, backlog=((1, "a/1:6-12"),), force=True).as_task_run()
    ]


def test_runs_to_commit_held_before_any_batch_is_empty() -> None:
    assert make_planner().runs_to_commit_held() == []


def test_caught_up_is_judged_against_the_limit_the_batch_was_planned_under() -> None:
    """Adaptive batches: a batch that filled its own (lower) limit has a backlog behind it,
    so it does not force a commit; one below its limit does."""
    planner = make_planner()
    full_at_8 = planner.plan_batch(0, list(ranges("a/0:0-4 a/1:0-4")), limit=8)
    assert [r.force_commit for r in full_at_8] == [False, False]
    below_8 = planner.plan_batch(1, list(ranges("a/0:4-7 a/1:4-8")), limit=8)
    assert [r.force_commit for r in below_8] == [True, True]
    # Without a limit the ceiling (max_records_per_batch, 10) decides, as before.
    assert [r.force_commit for r in planner.plan_batch(2, list(ranges("a/0:7-11 a/1:8-12")))] == [
        True,
        True,
    ]
