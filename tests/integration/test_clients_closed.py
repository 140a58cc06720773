"""Every Kafka client the library opens is closed by its owner's close(), not left to the
garbage collector (an unclosed client keeps reconnecting, and logging "Connection refused",
once the broker is gone).

Each test keeps the owner referenced while it counts after close(), and collects garbage
first: what is still open then is held by the owner, not garbage from elsewhere.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from confluent_kafka import Producer

from statekeeper.app.topics import prepare_topics
from statekeeper.kafka.adapter import producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.model import OffsetRange
from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.processing.output_producer import OutputProducer
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.environment import StateEnvironment
from statekeeper.stores import Stores
from statekeeper.worker.task_runner import (
    TaskRun,
    _services,
    close_worker_services,
    run_share,
    settings_to_json,
)
from tests.kafka_clients import open_kafka_clients, settled_kafka_clients

PARTITIONS = 2


def _settings(broker: Any, tmp_path: Any, **overrides: Any) -> StatekeeperSettings:
    return StatekeeperSettings(
        bootstrap_servers=broker.bootstrap_servers,
        application_id=f"clients-{uuid.uuid4().hex[:8]}",
        state_dir=tmp_path,
        **overrides,
    )


def test_state_environment_close_closes_its_producers_and_restore_consumers(
    broker, admin, tmp_path
):
    before = settled_kafka_clients()
    env = StateEnvironment(_settings(broker, tmp_path))
    specs = [Stores.persistent("kv").with_serdes("str", "int")]
    env.ensure_changelogs(specs, source_partitions=1)
    for batch_id in (1, 2):  # the second open restores from the changelog
        task = env.task("0_0", partition=0, specs=specs)
        task.open()
        task.store("kv").put("k", batch_id)
        task.commit(batch_id=batch_id, source_offsets={"in:0": batch_id})  # records + markers
        task.close()
    assert open_kafka_clients() > before
    env.close()
    env.close()  # idempotent
    assert settled_kafka_clients() == before
    assert env.writer is not None  # env stayed referenced while counting


def test_closing_worker_services_closes_parked_tasks_and_every_client(
    broker, admin, topic_name, tmp_path
):
    ensure_topic(admin, topic_name, PARTITIONS)
    producer = Producer(producer_config(broker.bootstrap_servers))
    for i in range(40):
        producer.produce(topic_name, b"x", f"k{i % 8}".encode(), partition=i % PARTITIONS)
    assert producer.flush(15) == 0
    del producer
    builder = StreamsBuilder()
    builder.stream(topic_name, key_serde="str", value_serde="str").group_by_key().count(
        Materialized.as_("counts")
    )
    topology = builder.build()
    settings = _settings(broker, tmp_path, commit_interval_ms=0)
    prepare_topics(admin, topology, settings.application_id, 30.0)
    settings_json = settings_to_json(settings)
    runs = [
        TaskRun(f"0_{p}", 0, p, (OffsetRange(topic_name, p, 0, 20),), 0, 1_000)
        for p in range(PARTITIONS)
    ]

    before = settled_kafka_clients()
    results = run_share(0, [runs], uuid.uuid4().hex, topology, settings_json)
    assert all(r.committed for r in results)
    services = _services(settings_json)
    assert len(services.parked) == PARTITIONS  # open, with their fetches
    assert open_kafka_clients() > before
    close_worker_services()
    assert settled_kafka_clients() == before
    assert _services(settings_json) is not services  # forgotten: the next task starts anew
    close_worker_services()


def test_output_producer_close_drops_what_the_broker_never_took(tmp_path):
    before = settled_kafka_clients()
    producer = OutputProducer("127.0.0.1:1", **{"message.timeout.ms": 60_000, "log_level": 0})
    producer.send("nowhere", b"k", b"v", partition=0)
    started = time.monotonic()
    producer.close(timeout_s=0.2)
    assert time.monotonic() - started < 5  # not the 60 s delivery timeout
    producer.close()  # idempotent
    assert settled_kafka_clients() == before
