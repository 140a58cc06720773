"""True log-end offsets and exact range reads against the real (embedded) broker."""

from __future__ import annotations

import random
import re
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from statekeeper.errors import BrokerUnavailableError, StatekeeperError
from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.consumed_run import (
    ConsumedRun,
    key_column,
    max_timestamp,
    timestamp_column,
    value_column,
)
from statekeeper.kafka.embedded import EmbeddedBroker, free_port
from statekeeper.kafka.model import KafkaRecord, OffsetRange, tp_key
from statekeeper.kafka.offsets import LogEndReader, log_end_offsets, log_start_offsets
from statekeeper.kafka.range_reader import (
    RangeFetch,
    RangeReadError,
    iter_partition_runs,
    iter_range_chunks,
    read_range_runs,
    read_ranges,
)

Spec = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def _spec(i: int) -> Spec:
    """Record i: every 7th has a null key, every 11th is a tombstone, every 5th has headers."""
    key = None if i % 7 == 0 else b"key-%d" % i
    value = None if i % 11 == 0 else b"value-%d" % i
    headers: list[tuple[str, bytes | None]] = (
        [("sk.seq", b"%d" % i), ("empty", None), ("dup", b"a"), ("dup", b"b")] if i % 5 == 0 else []
    )
    return key, value, headers


def _produce(
    bootstrap: str, topic: str, partitions: int, count: int, flush_every: int
) -> dict[int, list[tuple[int, Spec]]]:
    """Produce ``count`` records round-robin in several acknowledged produce batches; return
    (timestamp, spec) per partition in offset order."""
    producer = Producer(producer_config(bootstrap))
    sent: dict[int, list[tuple[int, Spec]]] = {p: [] for p in range(partitions)}
    base_ts = 1_700_000_000_000
    for i in range(count):
        partition = i % partitions
        key, value, headers = spec = _spec(i)
        producer.produce(
            topic, value, key, partition=partition, headers=headers or None, timestamp=base_ts + i
        )
        sent[partition].append((base_ts + i, spec))
        if (i + 1) % flush_every == 0:
            assert producer.flush(15) == 0
    assert producer.flush(15) == 0
    return sent


def _expected(topic: str, partition: int, sent: list[tuple[int, Spec]], start: int, end: int):
    return [
        KafkaRecord(topic, partition, off, ts, key, value, tuple(headers))
        for off, (ts, (key, value, headers)) in enumerate(sent)
        if start <= off < end
    ]


def _watermark_high(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer(consumer_config(bootstrap))
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, partition), 10, False)[1]
    finally:
        consumer.close()


def test_log_end_offsets_are_exact_after_many_produce_batches(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 5)
    # Partition 4 stays empty; the others get ~30 multi-record produce batches each.
    producer = Producer(producer_config(broker.bootstrap_servers, **{"linger.ms": 50}))
    counts = {0: 3000, 1: 1, 2: 777, 3: 250}
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic_name, b"v", b"k%d" % i, partition=partition)
            if i % 100 == 99:
                assert producer.flush(15) == 0
    assert producer.flush(15) == 0

    tps = [(topic_name, p) for p in range(5)]
    conf = consumer_config(broker.bootstrap_servers)
    ends = log_end_offsets(conf, tps, timeout_s=10)
    assert ends == {(topic_name, p): counts.get(p, 0) for p in range(5)}
    assert log_start_offsets(conf, tps, timeout_s=10) == {tp: 0 for tp in tps}
    # The reported high watermark may trail the end (it does on Tansu); EOF never does.
    assert _watermark_high(broker.bootstrap_servers, topic_name, 0) <= ends[(topic_name, 0)]


def test_log_end_offsets_of_many_partitions_in_one_pass(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 48)
    producer = Producer(producer_config(broker.bootstrap_servers))
    for i in range(48 * 40):
        producer.produce(topic_name, b"v", partition=i % 48)
    assert producer.flush(15) == 0
    conf = consumer_config(broker.bootstrap_servers)
    started = time.perf_counter()
    ends = log_end_offsets(conf, [(topic_name, p) for p in range(48)], timeout_s=10)
    elapsed = time.perf_counter() - started
    assert set(ends.values()) == {40}
    assert elapsed < 3.0, f"log_end_offsets of 48 partitions took {elapsed:.2f} s"
    assert log_end_offsets(conf, [], timeout_s=1) == {}


def test_read_ranges_returns_exactly_each_range(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 3)
    other = topic_name + "-b"
    ensure_topic(admin, other, 2)
    sent = _produce(broker.bootstrap_servers, topic_name, 3, 6000, flush_every=700)
    sent_other = _produce(broker.bootstrap_servers, other, 2, 500, flush_every=100)
    conf = consumer_config(broker.bootstrap_servers)

    ranges = [
        OffsetRange(topic_name, 0, 0, 2000),  # whole partition
        OffsetRange(topic_name, 1, 137, 1501),  # middle, crossing produce batches
        OffsetRange(topic_name, 2, 1999, 2000),  # the last record only
        OffsetRange(other, 0, 10, 10),  # empty
        OffsetRange(other, 1, 0, 1),  # the first record only
    ]
    out = read_ranges(conf, ranges, timeout_s=15)
    assert set(out) == {tp_key(r.topic, r.partition) for r in ranges}
    for r in ranges:
        source = (sent if r.topic == topic_name else sent_other)[r.partition]
        expected = _expected(r.topic, r.partition, source, r.start, r.end)
        assert out[tp_key(r.topic, r.partition)] == expected, r
    # Null keys, tombstones and headers (incl. a None header value and duplicates) survive.
    whole = out[tp_key(topic_name, 0)]
    assert any(rec.key is None for rec in whole)
    assert any(rec.value is None for rec in whole)
    assert ("empty", None) in whole[0].headers and whole[0].headers.count(("dup", b"a")) == 1

    # The same ranges as ConsumedRuns: equal as records, as columns, indexed and sliced.
    runs = read_range_runs(conf, ranges, timeout_s=15)
    assert set(runs) == set(out)
    for tp, run in runs.items():
        records = out[tp]
        assert isinstance(run, ConsumedRun) and len(run) == len(records)
        assert list(run) == records
        assert key_column(run) == key_column(records) == [r.key for r in records]
        assert value_column(run) == value_column(records) == [r.value for r in records]
        assert timestamp_column(run) == [r.timestamp_ms for r in records]
        expected_max = max(timestamp_column(run), default=-1)
        assert max_timestamp(run) == max_timestamp(records) == expected_max
        if records:
            assert run[0] == records[0] and run[-1] == records[-1]
            middle = len(records) // 2
            assert list(run[middle:]) == records[middle:]
            assert isinstance(run[middle:], ConsumedRun)


def test_random_ranges_match_and_chunks_are_single_partition_runs(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 4)
    sent = _produce(broker.bootstrap_servers, topic_name, 4, 4000, flush_every=333)
    conf = consumer_config(broker.bootstrap_servers)
    rng = random.Random(7)
    for _ in range(5):
        ranges = []
        for p in range(4):
            a, b = sorted(rng.sample(range(1001), 2))
            ranges.append(OffsetRange(topic_name, p, a, b))
        out = read_ranges(conf, ranges, timeout_s=15)
        for r in ranges:
            assert out[tp_key(topic_name, r.partition)] == _expected(
                topic_name, r.partition, sent[r.partition], r.start, r.end
            )

    chunked: dict[int, list[KafkaRecord]] = {p: [] for p in range(4)}
    full = [OffsetRange(topic_name, p, 0, 1000) for p in range(4)]
    for chunk in iter_range_chunks(conf, full, timeout_s=15, chunk_size=300):
        assert 0 < len(chunk) <= 300
        assert len({rec.partition for rec in chunk}) == 1
        chunked[chunk[0].partition].extend(chunk)
    for p in range(4):
        assert [rec.offset for rec in chunked[p]] == list(range(1000))
    runs = list(iter_partition_runs(conf, full[:1], timeout_s=15))
    assert sum(len(msgs) for _, msgs in runs) == 1000
    assert {tp for tp, _ in runs} == {(topic_name, 0)}


def test_a_log_end_reader_follows_the_log_across_reads(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    """One consumer for many lookups (as the streaming source uses it): each read sees what
    was produced since, on every partition, including one first read while empty."""
    ensure_topic(admin, topic_name, 3)
    tps = [(topic_name, p) for p in range(3)]
    reader = LogEndReader(consumer_config(broker.bootstrap_servers), timeout_s=10)
    producer = Producer(producer_config(broker.bootstrap_servers))
    expected = dict.fromkeys(tps, 0)
    try:
        assert reader.read(tps) == expected
        for round_ in range(4):
            for i in range(50 * (round_ + 1)):
                p = (i * (round_ + 1)) % 3 if round_ != 2 else 1  # round 2: one partition
                producer.produce(topic_name, b"v", partition=p)
                expected[(topic_name, p)] += 1
            assert producer.flush(15) == 0
            assert reader.read(tps) == expected
            assert reader.read(tps[:1]) == {tps[0]: expected[tps[0]]}
    finally:
        reader.close()
    assert log_end_offsets(consumer_config(broker.bootstrap_servers), tps) == expected


def test_a_log_end_reader_reads_only_partitions_whose_watermark_moved(
    broker: EmbeddedBroker, admin: Any, topic_name: str, monkeypatch: pytest.MonkeyPatch
):
    """An unchanged high watermark means an unchanged end, so the reader asks for the
    watermarks only; a partition that got one more record is read to its exact end again
    (many small produce batches, so a trailing watermark would show)."""
    from statekeeper.kafka import offsets

    ensure_topic(admin, topic_name, 2)
    tps = [(topic_name, 0), (topic_name, 1)]
    producer = Producer(producer_config(broker.bootstrap_servers))
    for i in range(40):
        producer.produce(topic_name, b"v", partition=i % 2)
        assert producer.flush(15) == 0  # one produce batch per record
    assigned: list[list] = []
    real_assign = offsets.assign_at
    monkeypatch.setattr(
        offsets,
        "assign_at",
        lambda c, starts: (assigned.append(sorted(starts)), real_assign(c, starts)),
    )
    reader = LogEndReader(consumer_config(broker.bootstrap_servers), timeout_s=10)
    try:
        assert reader.read(tps) == {tps[0]: 20, tps[1]: 20}
        assert assigned == [tps]
        assert reader.read(tps) == {tps[0]: 20, tps[1]: 20}
        assert assigned == [tps]  # nothing moved: no read
        producer.produce(topic_name, b"v", partition=1)
        assert producer.flush(15) == 0
        assert reader.read(tps) == {tps[0]: 20, tps[1]: 21}
        assert assigned == [tps, [tps[1]]]
    finally:
        reader.close()


def test_a_log_end_reader_recovers_after_an_error(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 1)
    reader = LogEndReader(consumer_config(broker.bootstrap_servers), timeout_s=3)
    try:
        with pytest.raises(StatekeeperError, match="does not exist"):
            reader.read([(topic_name, 5)])
        assert reader.read([(topic_name, 0)]) == {(topic_name, 0): 0}
    finally:
        reader.close()


def test_range_beyond_the_log_end_is_a_clear_error(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 1)
    _produce(broker.bootstrap_servers, topic_name, 1, 50, flush_every=50)
    conf = consumer_config(broker.bootstrap_servers)
    where = re.escape(f"{topic_name}[0] offsets 40..59")
    with pytest.raises(RangeReadError, match=where + ".*ends at offset 50"):
        read_ranges(conf, [OffsetRange(topic_name, 0, 40, 60)], timeout_s=1.0)


def test_unreachable_broker_raises_broker_unavailable():
    conf = consumer_config(
        f"127.0.0.1:{free_port()}", **{"socket.connection.setup.timeout.ms": 1000}
    )
    with pytest.raises(BrokerUnavailableError, match="topic-x"):
        log_end_offsets(conf, [("topic-x", 0)], timeout_s=1.0)
    with pytest.raises(StatekeeperError, match=r"topic-x\[0\] offsets 0\.\.9"):
        read_ranges(conf, [OffsetRange("topic-x", 0, 0, 10)], timeout_s=1.0)


def test_a_continuous_fetch_carries_on_where_its_ranges_ended(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 2)
    sent = _produce(broker.bootstrap_servers, topic_name, 2, 1200, flush_every=250)
    conf = consumer_config(broker.bootstrap_servers)

    def records(fetch: RangeFetch) -> dict[int, list[KafkaRecord]]:
        return {int(tp.rsplit(":", 1)[1]): list(run) for tp, run in fetch.read_runs().items()}

    first = [OffsetRange(topic_name, 0, 0, 100), OffsetRange(topic_name, 1, 50, 60)]
    with RangeFetch(conf, first, timeout_s=15, continuous=True) as fetch:
        got = records(fetch)
        assert got[0] == _expected(topic_name, 0, sent[0], 0, 100)
        assert got[1] == _expected(topic_name, 1, sent[1], 50, 60)
        time.sleep(0.3)  # the consumer reads ahead meanwhile
        # The next micro-batch starts at the ends: same consumer, same records as a new one.
        second = [OffsetRange(topic_name, 0, 100, 600), OffsetRange(topic_name, 1, 60, 61)]
        assert fetch.continue_with(second)
        got = records(fetch)
        assert got[0] == _expected(topic_name, 0, sent[0], 100, 600)
        assert got[1] == _expected(topic_name, 1, sent[1], 60, 61)
        # A gap, an overlap or a partition it never read needs a new fetch.
        assert not fetch.continue_with([OffsetRange(topic_name, 0, 601, 700)])
        assert not fetch.continue_with([OffsetRange(topic_name, 0, 599, 700)])
        assert not fetch.continue_with([OffsetRange(topic_name + "-x", 0, 0, 10)])
        # A partition without new records may be left out.
        assert fetch.continue_with(
            [OffsetRange(topic_name, 0, 600, 600), OffsetRange(topic_name, 1, 61, 600)]
        )
        assert records(fetch)[1] == _expected(topic_name, 1, sent[1], 61, 600)
    assert not fetch.continue_with([OffsetRange(topic_name, 1, 600, 601)])  # closed


def test_one_shot_reads_of_records_wider_than_a_bounded_fetch(
    broker: EmbeddedBroker, admin: Any, topic_name: str
):
    """One-shot reads fetch 1 MiB per partition (bounded_fetch_overrides): 8 MB of 20 kB
    records take several fetches and still arrive whole, and a short range at the start of
    a long partition is exact."""
    ensure_topic(admin, topic_name, 2)
    producer = Producer(producer_config(broker.bootstrap_servers))
    wide = [bytes([i % 251]) * 20_000 for i in range(400)]
    for i, value in enumerate(wide):
        producer.produce(topic_name, value, b"w%d" % i, partition=0)
    for i in range(20_000):
        producer.produce(topic_name, b"%d" % i, b"n%d" % i, partition=1)
    assert producer.flush(30) == 0
    conf = consumer_config(broker.bootstrap_servers)
    out = read_ranges(
        conf,
        [OffsetRange(topic_name, 0, 3, 397), OffsetRange(topic_name, 1, 0, 25)],
        timeout_s=30,
    )
    assert [r.value for r in out[tp_key(topic_name, 0)]] == wide[3:397]
    assert [r.offset for r in out[tp_key(topic_name, 1)]] == list(range(25))
    assert [r.value for r in out[tp_key(topic_name, 1)]] == [b"%d" % i for i in range(25)]
