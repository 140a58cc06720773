"""The executor side of a batch (run_share) against a real broker and real RocksDB:
cold opens, parked tasks claimed by the worker that holds them, no task run twice in one
pass, and a reader taking a parked task's lock by asking for it."""

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
from statekeeper.placement.shares import spread_runs
from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.settings import StatekeeperSettings
from statekeeper.worker.task_run import TaskRun
from statekeeper.worker.task_runner import (
    _services,
    run_share,
    settings_to_json,
)

PARTITIONS = 4


def _topology(topic: str) -> Any:
    builder = StreamsBuilder()
    builder.stream(topic, key_serde="str", value_serde="str").group_by_key().count(
        Materialized.as_("counts")
    )
    return builder.build()


def _batch(topic: str, batch_id: int, start: int, end: int) -> list[TaskRun]:
    return [
        TaskRun(f"0_{p}", 0, p, (OffsetRange(topic, p, start, end),), batch_id, 1_000 * batch_id)
        for p in range(PARTITIONS)
    ]


def test_parked_tasks_run_once_per_pass_in_the_worker_that_holds_them(
    broker, admin, topic_name, tmp_path
):
    ensure_topic(admin, topic_name, PARTITIONS)
    producer = Producer(producer_config(broker.bootstrap_servers))
    expected: Counter[str] = Counter()
    for i in range(800):  # 200 per partition, keys k0..k39
        key = f"k{i % 40}"
        producer.produce(topic_name, b"x", key.encode(), partition=i % PARTITIONS)
        expected[key] += 1
    assert producer.flush(15) == 0
    app = f"runner-{uuid.uuid4().hex[:8]}"
    settings = StatekeeperSettings(
        bootstrap_servers=broker.bootstrap_servers,
        application_id=app,
        state_dir=tmp_path,
        commit_interval_ms=0,  # every batch commits (tests/integration/test_commit_interval.py)
    )
    topology = _topology(topic_name)
    prepare_topics(admin, topology, app, 30.0)
    settings_json = settings_to_json(settings)

    # Pass 1, batch 0: both shares open their tasks cold and park them.
    shares = spread_runs(_batch(topic_name, 0, 0, 100), 2)
    job = uuid.uuid4().hex
    first = run_share(0, shares, job, topology, settings_json)
    first += run_share(1, shares, job, topology, settings_json)
    assert sorted(r.task_id for r in first) == [f"0_{p}" for p in range(PARTITIONS)]
    assert all(r.committed and not r.warm for r in first)
    assert len(_services(settings_json).parked) == PARTITIONS

    # Batch 1: this worker holds every task, so its first Spark task runs all four warm,
    # and a second Spark task of the same pass in this worker runs nothing again.
    shares = spread_runs(_batch(topic_name, 1, 100, 200), 2)
    job = uuid.uuid4().hex
    second = run_share(1, shares, job, topology, settings_json)
    assert sorted(r.task_id for r in second) == [f"0_{p}" for p in range(PARTITIONS)]
    assert all(r.committed and r.warm and r.records_processed == 100 for r in second)
    assert run_share(0, shares, job, topology, settings_json) == []

    # A re-run of batch 1 (a new pass) finds everything processed.
    rerun = run_share(0, shares, uuid.uuid4().hex, topology, settings_json)
    assert sum(r.records_processed for r in rerun) == 0

    # A reader asks for the parked tasks' locks and gets them.
    counts = read_store(settings, topology, "counts", PARTITIONS)
    assert counts == dict(expected)
    assert len(_services(settings_json).parked) == 0
