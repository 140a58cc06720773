"""A running app's memory does not grow with the number of micro-batches: 2,000 tiny batches
through the batch planner, the batch figures and the app's record/status path (no Spark: the
batch's runs are answered in-process) leave every per-batch buffer at its bound."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from statekeeper.app.batch_planner import BatchPlanner
from statekeeper.app.batch_stats import BatchStats
from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.app.topics import TopicPlan
from statekeeper.kafka.model import OffsetRange
from statekeeper.settings import StatekeeperSettings
from statekeeper.worker.task_run import TaskRun, TaskRunResult

from .batch_log_fake import SUBTOPOLOGY, MemoryBatchLog

BATCHES = 2_000
MAX_UNCOMMITTED = 5
WINDOW = 1_000
PARTITIONS = 2


def tiny_batch(batch_id: int) -> list[OffsetRange]:
    """One record on one partition of one topic per batch, round robin."""
    topic = sorted(SUBTOPOLOGY)[batch_id % len(SUBTOPOLOGY)]
    partition = (batch_id // len(SUBTOPOLOGY)) % PARTITIONS
    start = batch_id // (len(SUBTOPOLOGY) * PARTITIONS)
    return [OffsetRange(topic, partition, start, start + 1)]


def answer(runs: list[TaskRun]) -> list[TaskRunResult]:
    """What the workers report: every task ran its ranges and committed the batch."""
    return [
        TaskRunResult(
            run.task_id,
            run.batch_id,
            committed=True,
            committed_batch_id=run.batch_id,
            records_read=sum(r.count for r in run.ranges),
            records_processed=sum(r.count for r in run.ranges),
            seconds={"total": 0.001},
        )
        for run in runs
    ]


def logged(batches: int) -> MemoryBatchLog:
    log = MemoryBatchLog()
    for batch_id in range(batches):
        log.log(batch_id, tiny_batch(batch_id))
    return log


def test_the_planner_and_the_batch_figures_stay_bounded() -> None:
    planner = BatchPlanner(
        logged(BATCHES),
        subtopology_of=SUBTOPOLOGY.__getitem__,
        max_uncommitted_batches=MAX_UNCOMMITTED,
        max_records_per_batch=100,
    )
    stats = BatchStats(WINDOW)
    for batch_id in range(BATCHES):
        runs = planner.plan_batch(batch_id, tiny_batch(batch_id))
        results = answer(runs)
        planner.note_results(results)
        stats.record(batch_id, runs, results, seconds=0.01 + batch_id % 7 / 1000)
        assert len(planner.history_batch_ids) == min(batch_id + 1, MAX_UNCOMMITTED)
        assert len(stats.recent) == stats.seconds_window == min(batch_id + 1, WINDOW)
    assert len(planner.committed) == 4  # tasks 0_0 and 0_1 (a and a2), 1_0, 1_1
    # Totals count every batch; the median covers the window.
    throughput = stats.throughput()
    assert throughput["batches"] == BATCHES
    assert throughput["records_processed"] == stats.totals["records_processed"] == BATCHES
    assert throughput["batch_seconds_p50"] == 0.013
    assert [b["batch_id"] for b in stats.recent] == list(range(BATCHES - WINDOW, BATCHES))


class _Topology:
    """The part of a topology the app's batch path asks for."""

    def subtopology_of(self, _application_id: str, topic: str) -> int:
        return SUBTOPOLOGY[topic]


def _sizes(app: StatekeeperApp) -> dict[str, int]:
    """Everything on the batch path that could grow with the number of batches."""
    status = app.board.snapshot()
    return {
        "planner history": len(app.planner.history_batch_ids),
        "planner tasks": len(app.planner.committed),
        "batches": len(app.batches),
        "batch seconds": app._stats.seconds_window,
        "positions": len(app._positions),
        "status tasks": len(status["tasks"]),
        "status task sections": len(status["task_live"]),
    }


def test_the_apps_batch_path_stays_bounded_over_2000_batches(tmp_path: Path) -> None:
    settings = StatekeeperSettings(
        bootstrap_servers="127.0.0.1:1",
        application_id="bounded",
        state_dir=tmp_path / "state",
        checkpoint_dir=tmp_path / "checkpoints",
        status_port=None,
        max_uncommitted_batches=MAX_UNCOMMITTED,
        max_records_per_batch=100,
    )
    app = StatekeeperApp(_Topology(), settings, recent_batches=WINDOW)
    # Spark's checkpoint stands in memory; the status page's lag and task sections are on.
    app.planner = BatchPlanner(
        logged(BATCHES),
        subtopology_of=SUBTOPOLOGY.__getitem__,
        max_uncommitted_batches=MAX_UNCOMMITTED,
        max_records_per_batch=100,
    )
    app._plan = TopicPlan(
        {topic: PARTITIONS for topic in SUBTOPOLOGY},
        sorted({(sub, p) for sub in SUBTOPOLOGY.values() for p in range(PARTITIONS)}),
    )
    app._ends = {(topic, p): BATCHES for topic in SUBTOPOLOGY for p in range(PARTITIONS)}
    sizes: dict[int, dict[str, Any]] = {}
    status_bytes: dict[int, int] = {}
    for batch_id in range(BATCHES):
        app._process_batch(batch_id, tiny_batch(batch_id), answer, time.perf_counter())
        if batch_id + 1 in (WINDOW, BATCHES):
            sizes[batch_id + 1] = _sizes(app)
            status_bytes[batch_id + 1] = app.board.file.stat().st_size
    assert sizes[WINDOW] == sizes[BATCHES]
    assert status_bytes[BATCHES] < status_bytes[WINDOW] + 100  # a few more digits at most
    assert sizes[BATCHES]["planner history"] == MAX_UNCOMMITTED
    assert sizes[BATCHES]["batches"] == sizes[BATCHES]["batch seconds"] == WINDOW
    status = json.loads(app.board.file.read_text())  # the file written after every batch
    assert status["throughput"]["batches"] == BATCHES
    assert status["last_batch"]["batch_id"] == BATCHES - 1
    assert status["totals"]["records_processed"] == BATCHES
