"""A task that moves between executors (state directories), on a real broker and RocksDB.

Executor A (this process, state dir A) runs the task and keeps it parked with a batch it has
not committed; the driver moves the task to executor B (state dir B, epoch 2), which
restores it from the changelog, replays the batch A held and commits more. When the task
comes back to A (epoch 3), A's parked copy is stale: it is closed without a commit (its held
batch must never reach the changelog after B's) and the task reopens from A's local state,
caught up from the changelog. Every copy and a rebuild from the changelog equal the counts.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from confluent_kafka import Producer

from statekeeper.app.store_reader import read_store
from statekeeper.app.topics import prepare_topics
from statekeeper.kafka.adapter import producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.model import OffsetRange
from statekeeper.placement.assignment import Assignment, TaskPlacement
from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.settings import StatekeeperSettings
from statekeeper.worker.task_run import BatchSlice, TaskRun
from statekeeper.worker.task_runner import (
    _services,
    close_worker_services,
    run_share,
    settings_to_json,
)

TASK = "0_0"


def close_worker_services_of(settings_json: str) -> None:
    """Close one state directory's parked tasks (its worker went away), keeping the other's."""
    _services(settings_json).parked.close_all()


def _topology(topic: str) -> Any:
    builder = StreamsBuilder()
    builder.stream(topic, key_serde="str", value_serde="str").group_by_key().count(
        Materialized.as_("counts")
    )
    return builder.build()


def _run(topic: str, batch: int, start: int, end: int, **fields: Any) -> TaskRun:
    return TaskRun(TASK, 0, 0, (OffsetRange(topic, 0, start, end),), batch, 1_000 * batch, **fields)


def _assignment(app: str, executor: str, epoch: int, version: int) -> str:
    placement = {TASK: TaskPlacement(executor, (), epoch)}
    return Assignment(app, version, placement).to_json()


def test_a_moved_task_never_reuses_or_commits_its_stale_copy(broker, admin, topic_name, tmp_path):
    ensure_topic(admin, topic_name, 1)
    producer = Producer(producer_config(broker.bootstrap_servers))
    expected: Counter[str] = Counter()
    for i in range(400):
        key = f"k{i % 25}"
        producer.produce(topic_name, b"x", key.encode(), partition=0)
        expected[key] += 1
    assert producer.flush(15) == 0
    app = f"moves-{uuid.uuid4().hex[:8]}"
    base = dict(
        bootstrap_servers=broker.bootstrap_servers,
        application_id=app,
        commit_interval_ms=600_000,  # only forced commits: a held batch stays uncommitted
    )
    settings_a = StatekeeperSettings(state_dir=tmp_path / "a", **base)
    settings_b = StatekeeperSettings(state_dir=tmp_path / "b", **base)
    topology = _topology(topic_name)
    prepare_topics(admin, topology, app, 30.0)
    on_a, on_b = settings_to_json(settings_a), settings_to_json(settings_b)
    try:
        # Executor A (this process is executor "driver"), epoch 1: batch 0 committed,
        # batch 1 processed and held uncommitted in the parked copy.
        here = _assignment(app, "driver", 1, 1)
        r0 = run_share(
            0,
            [[_run(topic_name, 0, 0, 100, executor="driver", epoch=1, force_commit=True)]],
            "j0",
            topology,
            on_a,
            here,
        )
        r1 = run_share(
            0,
            [[_run(topic_name, 1, 100, 200, executor="driver", epoch=1)]],
            "j1",
            topology,
            on_a,
            here,
        )
        assert r0[0].committed and not r1[0].committed and r1[0].warm
        assert len(_services(on_a).parked) == 1

        # The task moves to executor B (epoch 2): A's worker, given the batch, leaves it.
        moved = _assignment(app, "b", 2, 2)
        skipped = run_share(
            0,
            [[_run(topic_name, 2, 200, 300, executor="b", epoch=2)]],
            "j2a",
            topology,
            on_a,
            moved,
        )
        assert [r for r in skipped if hasattr(r, "task_id")] == []
        assert [(r.task, r.reason) for r in skipped if hasattr(r, "reason")] == [
            (TASK, "task moved to executor b")
        ]
        assert len(_services(on_a).parked) == 0, "the stale copy stayed open"
        # B (a state dir of its own, here run without an executor tag, under epoch 2)
        # restores from the changelog, replays batch 1 that A never committed, and commits
        # batches 1-3.
        backlog = (BatchSlice(1, 1_000, (OffsetRange(topic_name, 0, 100, 200),)),)
        b2 = run_share(
            0, [[_run(topic_name, 2, 200, 300, backlog=backlog, epoch=2)]], "j2b", topology, on_b
        )
        b3 = run_share(
            0, [[_run(topic_name, 3, 300, 350, force_commit=True, epoch=2)]], "j3b", topology, on_b
        )
        assert b2[0].records_replayed == 100 and b3[0].committed
        close_worker_services()  # B's worker goes away (its locks with it)

        # Back to A with epoch 3: the copy on A's disk is at batch 0; it catches up from the
        # changelog (B's commits) and the last batch is applied once.
        back = _assignment(app, "driver", 3, 3)
        a4 = run_share(
            0,
            [[_run(topic_name, 4, 350, 400, executor="driver", epoch=3, force_commit=True)]],
            "j4",
            topology,
            on_a,
            back,
        )
        assert a4[0].committed and a4[0].executor_id == "driver"
        counts = {r["store"]: r for r in a4[0].restored}["counts"]
        assert counts["source"] == "local state" and counts["records"] > 0, a4[0].restored
        assert a4[0].records_replayed == 0 and a4[0].records_processed == 50

        # B runs batch 5 (epoch 4) while A's copy stays parked under epoch 3; then A gets
        # batch 6 under epoch 5: its parked copy is stale (batch 5 is not in it) and must be
        # reopened and caught up, not reused.
        for i in range(100):
            key = f"k{i % 25}"
            producer.produce(topic_name, b"x", key.encode(), partition=0)
            expected[key] += 1
        assert producer.flush(15) == 0
        b5 = run_share(
            0, [[_run(topic_name, 5, 400, 450, force_commit=True, epoch=4)]], "j5", topology, on_b
        )
        assert b5[0].committed and not b5[0].warm
        close_worker_services_of(on_b)
        again = _assignment(app, "driver", 5, 5)
        a6 = run_share(
            0,
            [[_run(topic_name, 6, 450, 500, executor="driver", epoch=5, force_commit=True)]],
            "j6",
            topology,
            on_a,
            again,
        )
        assert a6[0].stale_copy and "epoch 3" in a6[0].stale_copy, a6[0].stale_copy
        assert not a6[0].warm and a6[0].records_processed == 50
    finally:
        close_worker_services()

    assert read_store(settings_a, topology, "counts", 1) == dict(expected)
    rebuilt = settings_a.model_copy(update={"state_dir": tmp_path / "rebuilt"})
    assert read_store(rebuilt, topology, "counts", 1) == dict(expected)
