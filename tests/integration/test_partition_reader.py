"""The shared read-to-end loop (kafka/partition_reader) against the real (embedded) broker."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from statekeeper.errors import BrokerUnavailableError, StatekeeperError
from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.embedded import EmbeddedBroker, free_port
from statekeeper.kafka.offsets import watermarks
from statekeeper.kafka.partition_reader import (
    TP,
    NullKeyError,
    PartitionReader,
    ReadStalledError,
    assign_at,
    eof_consumer,
)


def _produce(bootstrap: str, topic: str, counts: dict[int, int], **overrides: Any) -> None:
    """``counts[p]`` records into partition ``p``, keys ``k<p>-<i>``, values ``v<i>``."""
    producer = Producer(producer_config(bootstrap, **overrides))
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic, b"v%d" % i, b"k%d-%d" % (partition, i), partition=partition)
            if i % 500 == 499:
                assert producer.flush(15) == 0
    assert producer.flush(15) == 0


def _read(
    bootstrap: str, starts: dict[TP, int], **reader_args: Any
) -> tuple[dict[TP, list[tuple[int, bytes]]], PartitionReader]:
    """(offset, key) of every record read per partition, and the finished reader."""
    consumer = eof_consumer(consumer_config(bootstrap))
    got: dict[TP, list[tuple[int, bytes]]] = {tp: [] for tp in starts}
    try:
        assign_at(consumer, starts)
        reader = PartitionReader(consumer, starts, **{"timeout_s": 10.0, **reader_args})
        for tp, messages, keys in reader:
            assert {(m.topic(), m.partition()) for m in messages} == {tp}
            if keys is not None:
                assert keys == [m.key() for m in messages]
            got[tp].extend((m.offset(), m.key()) for m in messages)
    finally:
        consumer.close()
    return got, reader


def test_an_empty_partition_ends_at_once(broker: EmbeddedBroker, admin: Any, topic_name: str):
    ensure_topic(admin, topic_name, 1)
    started = time.monotonic()
    got, reader = _read(broker.bootstrap_servers, {(topic_name, 0): OFFSET_BEGINNING})
    assert got == {(topic_name, 0): []}
    assert reader.positions == {(topic_name, 0): 0} and not reader.pending
    assert time.monotonic() - started < 3


def test_several_partitions_each_read_to_its_eof(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 4)
    counts = {0: 2500, 1: 1, 2: 730}  # partition 3 stays empty
    _produce(broker.bootstrap_servers, topic_name, counts)
    starts = {(topic_name, p): 0 for p in range(4)}
    got, reader = _read(broker.bootstrap_servers, starts, chunk_size=700)
    for p in range(4):
        n = counts.get(p, 0)
        assert got[(topic_name, p)] == [(i, b"k%d-%d" % (p, i)) for i in range(n)]
        assert reader.positions[(topic_name, p)] == n
    assert not reader.overshot

    # From the middle, keyed (runs carry their key column): the rest of each partition.
    starts = {(topic_name, 0): 2000, (topic_name, 2): 729}
    got, reader = _read(broker.bootstrap_servers, starts, keyed=True)
    assert [o for o, _ in got[(topic_name, 0)]] == list(range(2000, 2500))
    assert [o for o, _ in got[(topic_name, 2)]] == [729]


def test_reads_stop_at_eof_not_at_a_trailing_high_watermark(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    """Records go out in multi-record produce batches, so a broker whose high watermark
    trails (Tansu: start of the last batch + 1) reports less than the log holds; the read
    ends at EOF, with the stale watermark only as a size hint."""
    ensure_topic(admin, topic_name, 2)
    _produce(broker.bootstrap_servers, topic_name, {0: 1000, 1: 999}, **{"linger.ms": 50})
    tps = [(topic_name, 0), (topic_name, 1)]
    probe = Consumer(consumer_config(broker.bootstrap_servers))
    try:
        _, highs = watermarks(probe, tps, 10)
    finally:
        probe.close()
    assert highs[tps[0]] <= 1000 and highs[tps[1]] <= 999
    got, reader = _read(broker.bootstrap_servers, dict.fromkeys(tps, 0), size_hints=highs)
    assert len(got[tps[0]]) == 1000 and len(got[tps[1]]) == 999
    assert reader.positions == {tps[0]: 1000, tps[1]: 999}


def test_end_offsets_stop_each_partition_exactly(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 3)
    _produce(broker.bootstrap_servers, topic_name, {0: 3000, 1: 50, 2: 10})
    starts = {(topic_name, 0): 100, (topic_name, 1): 0, (topic_name, 2): 4}
    ends = {(topic_name, 0): 2100, (topic_name, 1): 50, (topic_name, 2): 5}
    got, reader = _read(broker.bootstrap_servers, starts, ends=ends, ends_exist=True)
    for tp, start in starts.items():
        assert [o for o, _ in got[tp]] == list(range(start, ends[tp]))
    # Records of partition 0 past its end were fetched in the same batches and dropped.
    assert (topic_name, 0) in reader.overshot

    # An end beyond the log: without ends_exist the partition's EOF ends the read...
    got, reader = _read(broker.bootstrap_servers, {(topic_name, 2): 8}, ends={(topic_name, 2): 20})
    assert [o for o, _ in got[(topic_name, 2)]] == [8, 9]
    # ...with it, an EOF below the end is stale and the read waits for the records.
    with pytest.raises(ReadStalledError, match=rf"{topic_name}\[2\] \(at offset 10\)"):
        _read(
            broker.bootstrap_servers,
            {(topic_name, 2): 8},
            ends={(topic_name, 2): 20},
            ends_exist=True,
            timeout_s=1.0,
        )


def test_a_start_beyond_the_end_is_an_error(broker: EmbeddedBroker, admin: Any, topic_name: str):
    """Kafka answers OFFSET_OUT_OF_RANGE; Tansu never answers, so the read stalls: an error
    either way, within the timeout."""
    ensure_topic(admin, topic_name, 1)
    _produce(broker.bootstrap_servers, topic_name, {0: 10})
    got, _ = _read(broker.bootstrap_servers, {(topic_name, 0): 10})  # at the end: nothing
    assert got == {(topic_name, 0): []}
    started = time.monotonic()
    with pytest.raises(StatekeeperError, match=rf"{topic_name}\[0\]"):
        _read(broker.bootstrap_servers, {(topic_name, 0): 15}, timeout_s=1.0)
    assert time.monotonic() - started < 5


def test_a_keyed_read_rejects_a_record_without_a_key(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 1)
    producer = Producer(producer_config(broker.bootstrap_servers))
    for i in range(5):
        producer.produce(topic_name, b"v", None if i == 3 else b"k", partition=0)
    assert producer.flush(15) == 0
    got, _ = _read(broker.bootstrap_servers, {(topic_name, 0): 0})  # unkeyed reads keep it
    assert [k for _, k in got[(topic_name, 0)]] == [b"k", b"k", b"k", None, b"k"]
    with pytest.raises(NullKeyError, match=rf"{topic_name}\[0\] offset 3") as info:
        _read(broker.bootstrap_servers, {(topic_name, 0): 0}, keyed=True)
    assert info.value.offset == 3


def test_an_unreachable_broker_is_a_clear_error_within_the_timeout():
    bootstrap = f"127.0.0.1:{free_port()}"
    consumer = eof_consumer(
        consumer_config(bootstrap, **{"socket.connection.setup.timeout.ms": 1000})
    )
    started = time.monotonic()
    try:
        assign_at(consumer, {("topic-x", 0): 0, ("topic-x", 1): 5})
        reader = PartitionReader(consumer, {("topic-x", 0): 0, ("topic-x", 1): 5}, timeout_s=1.0)
        with pytest.raises(BrokerUnavailableError) as info:
            reader.drain()
    finally:
        consumer.close()
    assert time.monotonic() - started < 5
    assert isinstance(info.value, ReadStalledError)
    assert "topic-x[0] (at offset 0), topic-x[1] (at offset 5)" in str(info.value)
    assert info.value.pending == [("topic-x", 0), ("topic-x", 1)]


def test_a_paused_partition_resumes_on_the_next_assignment(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    """A one-shot read pauses finished partitions; a consumer reused for the next read (as
    the log-end lookups reuse theirs) resumes them and reads what came since."""
    ensure_topic(admin, topic_name, 1)
    tp = (topic_name, 0)
    _produce(broker.bootstrap_servers, topic_name, {0: 20})
    consumer = eof_consumer(consumer_config(broker.bootstrap_servers))
    try:
        assign_at(consumer, {tp: 0})
        assert PartitionReader(consumer, {tp: 0}, timeout_s=10).drain() == {tp: 20}
        _produce(broker.bootstrap_servers, topic_name, {0: 5})
        consumer.resume([TopicPartition(*tp)])
        assign_at(consumer, {tp: 20})
        reader = PartitionReader(consumer, {tp: 20}, timeout_s=10)
        assert sum(len(run.messages) for run in reader) == 5
        assert reader.positions == {tp: 25}
    finally:
        consumer.close()
