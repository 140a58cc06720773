"""The commit interval (Kafka Streams' ``commit.interval.ms``) on the executor side, against a
real broker and real RocksDB: batches between commits stay in the worker that ran them; a
worker that loses them (its parked tasks dropped, as when it is killed or hands a task over)
loses nothing, because the next holder replays the backlog batch by batch with the original
batch ids, so the state is exact and replayed outputs repeat the dedupe ids of their first
emission."""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from typing import Any

import pytest
from confluent_kafka import Producer

from statekeeper.app.store_reader import read_store
from statekeeper.app.topics import prepare_topics
from statekeeper.errors import StatekeeperError
from statekeeper.kafka.adapter import producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.model import OffsetRange
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.processing.output_headers import dedupe_id
from statekeeper.processing.output_reader import read_deduped
from statekeeper.settings import StatekeeperSettings
from statekeeper.worker.task_run import BatchSlice, TaskRun
from statekeeper.worker.task_runner import _services, run_share, settings_to_json

PARTITIONS = 2
PER_BATCH = 50  # records per partition and batch
BATCHES = 5


class _Setup:
    def __init__(self, broker: Any, admin: Any, topic: str, tmp_path: Any, **overrides: Any):
        self.topic, self.out = topic, f"{topic}-out"
        ensure_topic(admin, topic, PARTITIONS)
        producer = Producer(producer_config(broker.bootstrap_servers))
        self.expected: Counter[str] = Counter()
        for i in range(PARTITIONS * PER_BATCH * BATCHES):
            key = f"k{i % 20}"  # 20 keys, each on one partition
            producer.produce(topic, b"x", key.encode(), partition=(i % 20) % PARTITIONS)
            self.expected[key] += 1
        assert producer.flush(15) == 0
        app = f"interval-{uuid.uuid4().hex[:8]}"
        self.settings = StatekeeperSettings(
            bootstrap_servers=broker.bootstrap_servers,
            application_id=app,
            state_dir=tmp_path,
            **overrides,
        )
        builder = StreamsBuilder()
        builder.stream(topic, key_serde="str", value_serde="str").group_by_key().count(
            Materialized.as_("counts")
        ).to(self.out)
        self.topology = builder.build()
        prepare_topics(admin, self.topology, app, 30.0)
        ensure_topic(admin, self.out, PARTITIONS)
        self.settings_json = settings_to_json(self.settings)

    def ranges(self, batch_id: int, p: int) -> tuple[OffsetRange, ...]:
        start = batch_id * PER_BATCH
        return (OffsetRange(self.topic, p, start, start + PER_BATCH),)

    def run(self, batch_id: int, backlog_from: int = 0, *, force: bool = False) -> list[Any]:
        """Batch ``batch_id`` of every task, with the batches since ``backlog_from`` as its
        backlog (what the driver passes: those it has not seen committed)."""
        runs = [
            TaskRun(
                f"0_{p}",
                0,
                p,
                self.ranges(batch_id, p),
                batch_id,
                1_000 * batch_id,
                backlog=tuple(
                    BatchSlice(b, 1_000 * b, self.ranges(b, p))
                    for b in range(backlog_from, batch_id)
                ),
                force_commit=force,
            )
            for p in range(PARTITIONS)
        ]
        return run_share(0, [runs], uuid.uuid4().hex, self.topology, self.settings_json)

    def commit_only(self, batch_id: int, backlog_from: int) -> list[Any]:
        runs = [
            TaskRun(
                f"0_{p}",
                0,
                p,
                (),
                batch_id,
                1_000 * batch_id,
                backlog=tuple(
                    BatchSlice(b, 1_000 * b, self.ranges(b, p))
                    for b in range(backlog_from, batch_id + 1)
                ),
                force_commit=True,
            )
            for p in range(PARTITIONS)
        ]
        return run_share(0, [runs], uuid.uuid4().hex, self.topology, self.settings_json)

    def lose_the_worker(self) -> None:
        """What a killed worker or a handed-over task leaves: the parked tasks are closed
        without a commit."""
        _services(self.settings_json).parked.close_all()


def test_batches_between_commits_are_replayed_exactly_after_the_worker_loses_them(
    broker, admin, topic_name, tmp_path
):
    setup = _Setup(broker, admin, topic_name, tmp_path, commit_interval_ms=3_600_000)

    first = setup.run(0)
    # A task's first batch always commits: batch 0 has no logged start to replay from.
    assert all(r.committed and r.committed_batch_id == 0 for r in first)
    for batch_id in (1, 2):
        held = setup.run(batch_id, backlog_from=1)
        assert all(r.warm and not r.committed and r.committed_batch_id == 0 for r in held)
        assert all(r.records_processed == PER_BATCH for r in held)

    setup.lose_the_worker()
    resumed = setup.run(3, backlog_from=1)
    assert all(not r.warm and r.records_replayed == 2 * PER_BATCH for r in resumed)
    assert all(r.records_processed == PER_BATCH and r.committed_batch_id == 0 for r in resumed)

    held = setup.run(4, backlog_from=1)
    assert all(r.records_replayed == 0 and not r.committed for r in held)
    done = setup.commit_only(4, backlog_from=1)
    assert all(r.committed and r.committed_batch_id == 4 for r in done)
    assert all(r.records_replayed == 0 for r in done)  # the warm tasks held everything
    setup.lose_the_worker()

    counts = read_store(setup.settings, setup.topology, "counts", PARTITIONS)
    assert counts == dict(setup.expected)

    # Batches 1 and 2 were emitted twice; every copy of a dedupe id is the same record.
    copies: dict[Any, set[tuple[bytes, bytes]]] = defaultdict(set)
    emitted: Counter[Any] = Counter()
    for records in read_topic(broker.bootstrap_servers, setup.out).values():
        for record in records:
            rid = dedupe_id(record.headers)
            copies[rid].add((record.key, record.value))
            emitted[rid] += 1
    assert all(len(versions) == 1 for versions in copies.values())
    replayed_ids = {rid for rid, n in emitted.items() if n == 2}
    assert {int(rid[1]) for rid in replayed_ids} == {1, 2}
    deduped = read_deduped(broker.bootstrap_servers, setup.out)
    latest = {
        r.key.decode(): int.from_bytes(r.value, "big", signed=True)  # type: ignore[union-attr,arg-type]
        for r in deduped
    }
    assert latest == dict(setup.expected)


def test_a_cold_commit_only_run_replays_the_backlog_then_commits(
    broker, admin, topic_name, tmp_path
):
    setup = _Setup(broker, admin, topic_name, tmp_path, commit_interval_ms=3_600_000)
    for batch_id in range(BATCHES):
        setup.run(batch_id, backlog_from=1)
    setup.lose_the_worker()  # four uncommitted batches lost with it
    done = setup.commit_only(BATCHES - 1, backlog_from=1)
    assert all(r.committed and r.committed_batch_id == BATCHES - 1 for r in done)
    assert all(r.records_replayed == (BATCHES - 1) * PER_BATCH for r in done)
    setup.lose_the_worker()
    assert read_store(setup.settings, setup.topology, "counts", PARTITIONS) == dict(setup.expected)


def test_max_uncommitted_batches_bounds_what_a_task_holds(broker, admin, topic_name, tmp_path):
    setup = _Setup(
        broker, admin, topic_name, tmp_path, commit_interval_ms=3_600_000, max_uncommitted_batches=2
    )
    committed = [setup.run(b, backlog_from=1)[0].committed_batch_id for b in range(BATCHES)]
    assert committed == [0, 0, 2, 2, 4]
    setup.lose_the_worker()


def test_commit_interval_zero_commits_every_batch(broker, admin, topic_name, tmp_path):
    setup = _Setup(broker, admin, topic_name, tmp_path, commit_interval_ms=0)
    for b in range(3):
        assert all(r.committed and r.committed_batch_id == b for r in setup.run(b))
    setup.lose_the_worker()


def test_a_state_behind_its_batch_without_a_backlog_fails_clearly(
    broker, admin, topic_name, tmp_path
):
    setup = _Setup(broker, admin, topic_name, tmp_path, commit_interval_ms=3_600_000)
    setup.run(0)
    setup.run(1, backlog_from=1)
    setup.lose_the_worker()
    with pytest.raises(StatekeeperError, match="not in the backlog"):
        setup.run(2, backlog_from=2)
    setup.lose_the_worker()


def test_a_parked_task_handed_over_from_an_idle_worker_commits_first(
    broker, admin, topic_name, tmp_path
):
    setup = _Setup(broker, admin, topic_name, tmp_path, commit_interval_ms=3_600_000)
    for batch_id in range(3):
        setup.run(batch_id, backlog_from=1)
    # A reader asks for the locks; this worker runs no task now, so the watcher commits
    # batches 1 and 2 before letting go: the reader sees them (each key 3 x 5 times).
    counts = read_store(setup.settings, setup.topology, "counts", PARTITIONS)
    assert counts == {key: 15 for key in setup.expected}
    resumed = setup.run(3, backlog_from=1)
    assert all(not r.warm and r.records_replayed == 0 for r in resumed)
    setup.lose_the_worker()
