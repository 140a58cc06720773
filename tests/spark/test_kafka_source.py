"""The statekeeper_kafka / statekeeper_kafka_ranges sources and the Kafka writer on Spark."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from statekeeper.kafka.adapter import producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.embedded import EmbeddedBroker
from statekeeper.kafka.partitioning import partition_for_key as murmur2_partition
from statekeeper.spark.checkpoint_log import logged_batch_ranges

# Spark's JVM Kafka source schema (KafkaRecordToRowConverter.kafkaSchema with headers).
JVM_KAFKA_SCHEMA = (
    "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
    "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
)
BASE_TS = 1_750_000_000_000


def _produce(bootstrap: str, topic: str, partitions: int, start: int, count: int) -> list[tuple]:
    """Records start..start+count-1 round-robin; returns what a read must return, per record:
    (key, value, topic, partition, timestamp_ms, headers-or-None), in produce order."""
    producer = Producer(producer_config(bootstrap))
    sent = []
    for i in range(start, start + count):
        key = None if i % 7 == 0 else b"k%d" % i
        value = None if i % 11 == 0 else b"v%d" % i
        headers = [("h", b"%d" % i), ("none", None)] if i % 5 == 0 else None
        partition = i % partitions
        producer.produce(
            topic, value, key, partition=partition, headers=headers, timestamp=BASE_TS + i
        )
        sent.append((key, value, topic, partition, BASE_TS + i, headers))
        if i % 250 == 0:
            producer.flush(15)  # several produce batches
    assert producer.flush(15) == 0
    return sent


def _reader(spark: Any, bootstrap: str, topic: str, fmt: str = "statekeeper_kafka") -> Any:
    return (
        spark.read.format(fmt)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
    )


def _as_expected(row: Any) -> tuple:
    ts = row.timestamp.replace(tzinfo=dt.UTC) if row.timestamp.tzinfo is None else row.timestamp
    headers = None if row.headers is None else [(h.key, h.value) for h in row.headers]
    return (
        row.key,
        row.value,
        row.topic,
        row.partition,
        int(ts.timestamp() * 1000),
        headers,
    )


def test_batch_read_equals_what_was_produced(
    spark: Any, broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 3)
    sent = _produce(broker.bootstrap_servers, topic_name, 3, 0, 900)
    df = _reader(spark, broker.bootstrap_servers, topic_name).load()
    assert df.schema.simpleString() == JVM_KAFKA_SCHEMA
    rows = df.collect()
    assert len(rows) == 900
    assert {r.timestampType for r in rows} == {0}  # CreateTime
    by_partition: dict[int, list[Any]] = {}
    for row in rows:
        by_partition.setdefault(row.partition, []).append(row)
    for partition, part_rows in by_partition.items():
        assert [r.offset for r in part_rows] == list(range(len(part_rows)))
        expected = [s for s in sent if s[3] == partition]
        assert [_as_expected(r) for r in part_rows] == expected

    # Explicit offsets select exactly [start, end) per partition.
    ranged = (
        _reader(spark, broker.bootstrap_servers, topic_name)
        .option("startingOffsets", f'{{"{topic_name}": {{"0": 10, "2": -2}}}}')
        .option("endingOffsets", f'{{"{topic_name}": {{"0": 20, "1": 5, "2": -1}}}}')
        .load()
        .select("partition", "offset")
        .collect()
    )
    got = sorted((r.partition, r.offset) for r in ranged)
    want = [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]
    want += [(2, o) for o in range(300)]
    assert got == want


def test_bad_options_fail_with_the_option_named(
    spark: Any, broker: EmbeddedBroker, admin: Any, topic_name: str
):
    ensure_topic(admin, topic_name, 1)
    bootstrap = broker.bootstrap_servers
    cases = [
        (
            spark.read.format("statekeeper_kafka").option("subscribe", topic_name),
            "kafka.bootstrap.servers",
        ),
        (
            spark.read.format("statekeeper_kafka").option("kafka.bootstrap.servers", bootstrap),
            "subscribe",
        ),
        (
            _reader(spark, bootstrap, topic_name).option("startingOffsets", "{bad"),
            "startingOffsets",
        ),
        (_reader(spark, bootstrap, topic_name + "-missing"), "does not exist"),
    ]
    # An existing but empty topic is not an error: no partitions, no rows.
    assert _reader(spark, bootstrap, topic_name).load().count() == 0
    assert _reader(spark, bootstrap, topic_name, "statekeeper_kafka_ranges").load().count() == 0
    for reader, fragment in cases:
        with pytest.raises(Exception) as info:  # noqa: B017 - Spark wraps the ConfigError
            reader.load().collect()
        assert fragment in str(info.value)
        assert "ConfigError" in str(info.value)


def _in_offset_order(batches: list[list[Any]]) -> list[tuple]:
    rows = sorted((r for rows in batches for r in rows), key=lambda r: (r.partition, r.offset))
    return [_as_expected(r) for r in rows]


def _in_partition_order(sent: list[tuple]) -> list[tuple]:
    return sorted(sent, key=lambda s: s[3])  # stable: produce order = offset order


def _run_stream(
    spark: Any, bootstrap: str, topic: str, checkpoint: Path, fmt: str, **options: str
) -> list[list[Any]]:
    """Run an availableNow query to completion; return the rows of each micro-batch."""
    batches: list[list[Any]] = []

    def collect(df: Any, batch_id: int) -> None:
        batches.append(df.collect())

    reader = spark.readStream.format(fmt).option("kafka.bootstrap.servers", bootstrap)
    reader = reader.option("subscribe", topic).option("startingOffsets", "earliest")
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(90), "availableNow query did not finish"
    assert query.exception() is None
    return batches


def test_stream_reads_each_record_once_across_batches_and_restarts(
    spark: Any, broker: EmbeddedBroker, admin: Any, topic_name: str, tmp_path: Path
):
    ensure_topic(admin, topic_name, 4)
    bootstrap = broker.bootstrap_servers
    sent = _produce(bootstrap, topic_name, 4, 0, 1000)
    checkpoint = tmp_path / "checkpoint"

    first = _run_stream(
        spark, bootstrap, topic_name, checkpoint, "statekeeper_kafka", maxRecordsPerBatch="300"
    )
    assert len(first) >= 4  # 1000 records, at most 300 per batch
    assert all(0 < len(rows) <= 300 for rows in first)
    seen = [(r.partition, r.offset) for rows in first for r in rows]
    assert len(seen) == len(set(seen)) == 1000
    assert _in_offset_order(first) == _in_partition_order(sent)

    more = _produce(bootstrap, topic_name, 4, 1000, 500)
    second = _run_stream(
        spark, bootstrap, topic_name, checkpoint, "statekeeper_kafka", maxRecordsPerBatch="300"
    )
    resumed = [(r.partition, r.offset) for rows in second for r in rows]
    assert len(resumed) == len(set(resumed)) == 500
    assert not set(resumed) & set(seen)
    assert _in_offset_order(second) == _in_partition_order(more)

    # Nothing new: a third run plans no data.
    third = _run_stream(
        spark, bootstrap, topic_name, checkpoint, "statekeeper_kafka", maxRecordsPerBatch="300"
    )
    assert sum(len(rows) for rows in third) == 0


def test_ranges_source_batch_and_processing_time_stream(
    spark: Any, broker: EmbeddedBroker, admin: Any, topic_name: str, tmp_path: Path
):
    ensure_topic(admin, topic_name, 3)
    other = topic_name + "-b"
    ensure_topic(admin, other, 3)
    bootstrap = broker.bootstrap_servers
    _produce(bootstrap, topic_name, 3, 0, 300)  # 100 per partition
    _produce(bootstrap, other, 3, 0, 30)  # 10 per partition

    ranges_df = _reader(
        spark, bootstrap, f"{topic_name},{other}", "statekeeper_kafka_ranges"
    ).load()
    assert ranges_df.schema.simpleString() == (
        "struct<topic:string,partition:int,start_offset:bigint,end_offset:bigint>"
    )
    rows = sorted(tuple(r) for r in ranges_df.collect())
    assert rows == sorted(
        [(topic_name, p, 0, 100) for p in range(3)] + [(other, p, 0, 10) for p in range(3)]
    )
    # Co-partitioned: one Spark partition per partition number, holding both topics.
    per_spark_partition = (
        ranges_df.rdd.glom().map(lambda part: sorted({r.partition for r in part})).collect()
    )
    assert sorted(per_spark_partition) == [[0], [1], [2]]

    # Streaming with a processing-time trigger: ranges tile the offsets without gaps or overlap,
    # and Spark's offset log gives the same ranges as the source (what the runtime relies on).
    # Keyed by batch id: a stop between foreachBatch and Spark's commit log makes the restart
    # replay that batch (same id, same ranges), which is Spark's contract, not a double read.
    batches: dict[int, list[tuple[str, int, int, int]]] = {}
    from_log: list[int] = []
    checkpoint = tmp_path / "ranges-checkpoint"

    def collect(df: Any, batch_id: int) -> None:
        rows = sorted(tuple(r) for r in df.collect())
        if batch_id in batches:
            assert batches[batch_id] == rows, f"batch {batch_id} replayed with other ranges"
        batches[batch_id] = rows
        logged = logged_batch_ranges(checkpoint, batch_id)
        if logged is not None:
            as_rows = sorted((r.topic, r.partition, r.start, r.end) for r in logged)
            assert as_rows == rows, f"batch {batch_id}"
            from_log.append(batch_id)

    def start_query() -> Any:
        return (
            spark.readStream.format("statekeeper_kafka_ranges")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic_name)
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerBatch", "120")
            .load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    def seen() -> list[tuple[str, int, int, int]]:
        return [row for rows in list(batches.values()) for row in rows]

    def covered() -> int:
        return sum(end - start for _, _, start, end in seen())

    def wait_for(total: int) -> None:
        deadline = time.monotonic() + 60
        while covered() < total:
            assert time.monotonic() < deadline, f"only {covered()} of {total} offsets planned"
            time.sleep(0.1)

    query = start_query()
    try:
        wait_for(300)
        _produce(bootstrap, topic_name, 3, 300, 90)
        wait_for(390)
    finally:
        query.stop()
    _produce(bootstrap, topic_name, 3, 390, 60)
    query = start_query()  # resumes from the checkpoint
    try:
        wait_for(450)
        time.sleep(0.5)  # a spurious extra batch would show up here
    finally:
        query.stop()
    assert covered() == 450
    assert len(from_log) >= 3 and 0 not in from_log  # batch 0's start is not logged
    assert all(end - start <= 120 for _, _, start, end in seen())
    for p in range(3):
        spans = sorted((s, e) for t, part, s, e in seen() if part == p)
        assert spans[0][0] == 0 and spans[-1][1] == 150
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))


def test_writer_round_trips_keys_headers_and_tombstones(
    spark: Any, broker: EmbeddedBroker, admin: Any, topic_name: str, tmp_path: Path
):
    ensure_topic(admin, topic_name, 4)
    bootstrap = broker.bootstrap_servers
    data = [
        ("alpha", b"1", [("sk.app", b"a"), ("x", None)], None),
        ("beta", None, [], None),  # tombstone
        (None, b"no-key", None, 2),  # explicit partition
        ("gamma", b"3", None, None),
    ] + [(f"key-{i}", b"v%d" % i, None, None) for i in range(40)]
    df = spark.createDataFrame(
        data,
        "key string, value binary, headers array<struct<key:string,value:binary>>, partition int",
    )
    df.write.format("statekeeper_kafka").option("kafka.bootstrap.servers", bootstrap).option(
        "topic", topic_name
    ).mode("append").save()

    rows = _reader(spark, bootstrap, topic_name).load().collect()
    assert len(rows) == len(data)
    by_key = {r.key: r for r in rows}
    assert by_key[b"alpha"].value == b"1"
    assert [(h.key, h.value) for h in by_key[b"alpha"].headers] == [("sk.app", b"a"), ("x", None)]
    assert by_key[b"beta"].value is None and by_key[b"beta"].headers is None
    assert by_key[None].value == b"no-key" and by_key[None].partition == 2
    # Keyed records land where a Java producer would put them.
    for row in rows:
        if row.key is not None:
            assert row.partition == murmur2_partition(row.key, 4), row.key

    # Streaming writer: copy the topic with the topic column, availableNow.
    copy = topic_name + "-copy"
    ensure_topic(admin, copy, 4)
    query = (
        spark.readStream.format("statekeeper_kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic_name)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value", "headers", "partition", f"'{copy}' AS topic")
        .writeStream.format("statekeeper_kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("checkpointLocation", str(tmp_path / "copy-checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(90)
    copied = _reader(spark, bootstrap, copy).load().collect()
    key_of = lambda r: (r.partition, r.offset)  # noqa: E731
    assert [(r.key, r.value, r.headers, r.partition) for r in sorted(copied, key=key_of)] == [
        (r.key, r.value, r.headers, r.partition) for r in sorted(rows, key=key_of)
    ]
