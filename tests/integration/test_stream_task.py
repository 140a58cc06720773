"""StreamTask against a real broker and a real TaskStateManager: batches, commits, a crash
before commit, reopen (skip of processed offsets, identical re-emitted outputs), and a full
restore from the changelogs after the local state is wiped."""

from __future__ import annotations

import gc
import json
import shutil
from typing import Any

import pytest
from confluent_kafka import Producer

from spark_apps.patient_monitoring import topology as patient_monitoring
from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.model import KafkaRecord, OffsetRange, tp_key
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.kafka.range_reader import read_range_runs, read_ranges
from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.processing.output_producer import OutputProducer
from statekeeper.processing.stream_task import StreamTask
from statekeeper.settings import load_settings
from statekeeper.state.environment import StateEnvironment

TIMEOUT = 30.0


class Runner:
    """What the Spark task runner does for one task, minus Spark."""

    def __init__(self, bootstrap: str, tmp_path: Any, app: str, topology: Any, input_topic: str):
        self.bootstrap = bootstrap
        self.app = app
        self.topology = topology
        self.input = input_topic
        self.settings = load_settings(
            bootstrap_servers=bootstrap, state_dir=tmp_path / "state", application_id=app
        )
        self.env = StateEnvironment(self.settings)
        self.specs = topology.store_specs(0)
        self.env.ensure_changelogs(self.specs, source_partitions=1)
        self.outputs = OutputProducer(bootstrap)
        self.consumer_conf = consumer_config(bootstrap, group_id=f"{app}-tasks")
        self.restores: list[Any] = []

    def run(self, batch_id: int, start: int, end: int, *, commit: bool = True) -> Any:
        state = self.env.task("0_0", 0, self.specs)
        self.restores = state.open()
        try:
            # As the Spark task runner reads: ConsumedRuns, records built only where needed.
            records = read_range_runs(
                self.consumer_conf, [OffsetRange(self.input, 0, start, end)], TIMEOUT
            )
            task = StreamTask(self.topology, 0, 0, state, self.outputs, self.app)
            result = task.process_batch(batch_id, 1_000 * batch_id, records)
            self.outputs.flush(TIMEOUT)
            if commit:
                state.commit(batch_id, {tp_key(self.input, 0): end})
            stores = {name: dict(_items(store)) for name, store in state.stores.items()}
            return result, stores, state.processed_offsets
        finally:
            state.close()

    def wipe_local_state(self) -> None:
        shutil.rmtree(self.settings.state_dir / self.app / "0_0")

    def read(self, topic: str) -> list[KafkaRecord]:
        end = log_end_offsets(self.consumer_conf, [(topic, 0)], TIMEOUT)[(topic, 0)]
        return read_ranges(self.consumer_conf, [OffsetRange(topic, 0, 0, end)], TIMEOUT)[
            tp_key(topic, 0)
        ]

    def close(self) -> None:
        self.outputs.close()
        self.env.close()


def _items(store: Any) -> Any:
    for item in store.all():
        yield (item[0], item[1]) if len(item) == 2 else ((item[0], item[1]), item[2])


def _produce(bootstrap: str, topic: str, items: list[tuple[bytes | None, bytes | None, int]]):
    producer = Producer(producer_config(bootstrap))
    for key, value, ts in items:
        producer.produce(topic, value, key, timestamp=ts)
    assert producer.flush(TIMEOUT) == 0


@pytest.fixture
def runner_for(broker, admin, topic_name, tmp_path):
    made: list[Runner] = []

    def make(topology: Any, items: list[tuple[bytes | None, bytes | None, int]], outputs=()):
        ensure_topic(admin, topic_name, 1, {})
        app = f"app-{topic_name}"[:100]
        for topic in [*outputs, f"{app}-dlq"]:
            ensure_topic(admin, topic if topic.startswith(app) else f"{topic_name}-{topic}", 1)
        _produce(broker.bootstrap_servers, topic_name, items)
        runner = Runner(broker.bootstrap_servers, tmp_path, app, topology, topic_name)
        made.append(runner)
        return runner

    yield make
    for runner in made:
        runner.close()
    made.clear()  # drop the clients now, not after the session's broker has stopped
    gc.collect()


def test_count_task_commits_restores_and_skips_processed_offsets(runner_for, topic_name):
    out = f"{topic_name}-counts"
    b = StreamsBuilder()
    counts = (
        b.stream(topic_name, key_serde="str", value_serde="str")
        .group_by_key()
        .count(Materialized.as_("counts").with_caching_enabled(64 * 1024))
    )
    counts.to_stream().map_values(str).to(out, value_serde="str")
    topology = b.build()
    items = [(f"k{i % 7}".encode(), b"x", 1_000 + i) for i in range(300)]
    items[42] = (None, b"x", 1_042)  # keyless → DLQ
    runner = runner_for(topology, items, outputs=["counts"])

    def expected(upto: int) -> dict[str, int]:
        counts: dict[str, int] = {}
        for key, _, _ in items[:upto]:
            if key is not None:
                counts[key.decode()] = counts.get(key.decode(), 0) + 1
        return counts

    r1, stores, _ = runner.run(1, 0, 100)
    assert r1.vectorized and r1.records_dlq == 1 and r1.records_processed == 99
    assert stores["counts"] == expected(100)
    runner.run(2, 100, 200)

    # Batch 3 crashes after its outputs were flushed, before the commit.
    crashed, _, _ = runner.run(3, 200, 300, commit=False)
    outputs_after_crash = runner.read(out)

    # The retry (same batch id) starts from batch 2's state; records it is handed again from
    # below the processed offsets are skipped.
    retry, stores, processed = runner.run(3, 150, 300)
    assert retry.records_skipped == 50 and retry.records_processed == 100
    assert stores["counts"] == expected(300)
    assert processed == {tp_key(topic_name, 0): 300}
    assert stores["sk-task-state-0"]["stream-time"] == 1_299
    retried_outputs = runner.read(out)[len(outputs_after_crash) :]
    assert len(retried_outputs) == crashed.records_output == 7
    ids = [tuple(dict(r.headers)[h] for h in ("sk.task", "sk.batch", "sk.seq")) for r in
           retried_outputs]  # fmt: skip
    crashed_ids = [
        tuple(dict(r.headers)[h] for h in ("sk.task", "sk.batch", "sk.seq"))
        for r in outputs_after_crash[-7:]
    ]
    assert ids == crashed_ids  # same dedupe ids: consumers drop the duplicates
    latest = {r.key.decode(): int(r.value) for r in runner.read(out)}
    assert latest == expected(300)

    # A batch delivered again after its commit changes nothing.
    again, stores, _ = runner.run(4, 200, 300)
    assert again.records_skipped == 100 and again.records_output == 0

    # Lose the local state: everything, stream time included, comes back from the changelogs.
    runner.wipe_local_state()
    result, stores, processed = runner.run(5, 300, 300)
    assert any(o.full for o in runner.restores)
    assert stores["counts"] == expected(300)
    assert stores["sk-task-state-0"]["stream-time"] == 1_299
    assert processed == {tp_key(topic_name, 0): 300}
    dlq = runner.read(f"{runner.app}-dlq")
    assert [dict(r.headers)["sk.error.type"] for r in dlq] == [b"null-key"]


def test_patient_monitoring_task_restores_windows_and_suppression(runner_for, topic_name):
    generate = pytest.importorskip("spark_apps.patient_monitoring.generator")
    reference = pytest.importorskip("spark_apps.patient_monitoring.reference")
    from statekeeper.generate.records import place_records

    generated = generate.patient_events(patients=6, minutes=15, seed=5, malformed_share=0.02)
    placed = place_records(generated, topic_name, 1)[0]
    hr, alerts = f"{topic_name}-hr", f"{topic_name}-alerts"
    topology = patient_monitoring.build_topology(
        input_topic=topic_name, heart_rate_topic=hr, alerts_topic=alerts
    )
    runner = runner_for(
        topology, [(r.key, r.value, r.timestamp_ms) for r in placed], outputs=["hr", "alerts"]
    )
    size = len(placed) // 4 + 1
    bounds = [(i, min(i + size, len(placed))) for i in range(0, len(placed), size)]
    for batch_id, (start, end) in enumerate(bounds):
        if batch_id == 2:
            runner.wipe_local_state()  # windows, buffer and stream time from the changelogs
        _, stores, _ = runner.run(batch_id, start, end)

    expected = reference.recompute({0: placed})
    assert {k: v for k, v in stores["pulse-counts"].items()} == expected.pulse_windows
    assert stores["heart-rate"] == expected.heart_rate
    assert stores["sk-task-state-0"]["stream-time"] == expected.stream_time[(topic_name, 0)]
    outputs = [(r.key.decode(), None if r.value is None else json.loads(r.value))
               for r in runner.read(hr)]  # fmt: skip
    assert outputs == expected.heart_rate_outputs
    assert [json.loads(r.value) for r in runner.read(alerts)] == expected.alerts
