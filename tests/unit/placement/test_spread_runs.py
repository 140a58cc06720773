"""Dealing a batch's stream tasks onto Spark tasks."""

from __future__ import annotations

from statekeeper.kafka.model import OffsetRange
from statekeeper.placement.shares import spread_runs
from statekeeper.worker.task_run import TaskRun


def run(task: str, *counts: int) -> TaskRun:
    ranges = tuple(OffsetRange(f"t{i}", int(task[-1]), 0, n) for i, n in enumerate(counts))
    return TaskRun(task, 0, int(task[-1]), ranges, batch_id=3, batch_time_ms=0)


def load(group: list[TaskRun]) -> int:
    return sum(r.count for t in group for r in t.ranges)


def test_every_run_lands_in_exactly_one_group_and_loads_balance():
    runs = [run("0_0", 900), run("0_1", 500), run("0_2", 400), run("0_3", 300, 200), run("0_4", 1)]
    groups = spread_runs(runs, 2)
    assert sorted(t.task_id for g in groups for t in g) == sorted(t.task_id for t in runs)
    assert sorted(map(load, groups)) == [1001, 1300]  # largest first, to the least loaded


def test_never_more_groups_than_runs_or_slots_and_never_empty():
    runs = [run("0_0", 5), run("0_1", 5), run("0_2", 0)]
    assert len(spread_runs(runs, 8)) == 3
    assert len(spread_runs(runs, 1)) == 1 and load(spread_runs(runs, 1)[0]) == 10
    assert spread_runs(runs, 0) == [sorted(runs, key=lambda t: (-load([t]), t.task_id))]
    assert spread_runs([], 4) == []


def test_the_deal_is_deterministic():
    runs = [run(f"0_{p}", 10) for p in range(6)]
    assert spread_runs(runs, 4) == spread_runs(list(reversed(runs)), 4)
