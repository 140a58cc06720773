"""OutputProducer against the real (embedded) broker: Java partitioning and failures."""

from __future__ import annotations

from typing import Any

import pytest

from statekeeper.errors import ProduceError
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.embedded import EmbeddedBroker, free_port
from statekeeper.kafka.model import OffsetRange
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.kafka.partitioning import partition_for_key as murmur2_partition
from statekeeper.kafka.range_reader import read_ranges
from statekeeper.processing.output_producer import OutputProducer


def test_keyed_records_are_partitioned_like_java_and_round_trip(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 4)
    producer = OutputProducer(broker.bootstrap_servers)
    keys = [b"word-%d" % i for i in range(200)]
    for i, key in enumerate(keys):
        value = None if i % 10 == 0 else b"%d" % i
        producer.send(topic_name, key, value, [("sk.seq", b"%d" % i)], timestamp_ms=1000 + i)
    producer.send(topic_name, None, b"explicit", [], partition=3)
    producer.flush(15)
    producer.close()
    assert producer.sent == 201

    conf = consumer_config(broker.bootstrap_servers)
    ends = log_end_offsets(conf, [(topic_name, p) for p in range(4)])
    out = read_ranges(conf, [OffsetRange(t, p, 0, end) for (t, p), end in ends.items()])
    records = [r for recs in out.values() for r in recs]
    assert len(records) == 201
    for rec in records:
        if rec.key is None:
            assert (rec.partition, rec.value) == (3, b"explicit")
            continue
        i = int(rec.headers[0][1])
        assert rec.partition == murmur2_partition(rec.key, 4)
        assert rec.value == (None if i % 10 == 0 else b"%d" % i)
        assert rec.timestamp_ms == 1000 + i


def test_flush_raises_when_records_are_not_acknowledged():
    producer = OutputProducer(
        f"127.0.0.1:{free_port()}", **{"message.timeout.ms": 1000, "enable.idempotence": False}
    )
    producer.send("nowhere", b"k", b"v")
    with pytest.raises(ProduceError, match="not acknowledged|failed"):
        producer.flush(3)
    producer.flush(1)  # errors are reported once; the producer stays usable
    producer.close(0)


def test_unknown_partition_is_a_produce_error(broker: EmbeddedBroker, admin: Any, topic_name: str):
    ensure_topic(admin, topic_name, 1)
    producer = OutputProducer(broker.bootstrap_servers)
    producer.send(topic_name, b"k", b"v")
    producer.flush(10)  # metadata known now
    with pytest.raises(ProduceError, match=rf"{topic_name}"):
        producer.send(topic_name, b"k", b"v", partition=7)
        producer.flush(5)
    producer.close(0)
