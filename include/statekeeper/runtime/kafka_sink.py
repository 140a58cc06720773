"""Writing to Kafka: the task's :class:`OutputProducer` and a Spark DataFrame writer.

:class:`OutputProducer` sends output, repartition and DLQ records. Keyed records are
partitioned like Java clients (murmur2 of the key bytes, librdkafka's
``murmur2_random``), so repartition and output topics are co-partitioned exactly as Kafka
Streams would do it; :func:`murmur2_partition` computes the same partition in Python.
Delivery failures are collected and raised by :meth:`OutputProducer.flush`.

The writer (format ``statekeeper_kafka``, batch ``df.write`` and streaming
``df.writeStream``) takes the columns of Spark's Kafka sink: ``value`` (binary or string,
null = tombstone), optional ``key`` (binary or string, nullable), ``topic`` (string, or the
``topic`` option, which wins like in Spark), optional ``partition`` (int), optional
``headers`` (array<struct<key string, value binary>>) and optional ``timestamp``.
Options: ``kafka.bootstrap.servers``, ``topic``, ``timeoutSeconds`` and other ``kafka.*``
keys as librdkafka producer settings.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from statekeeper.errors import ConfigError, ProduceError
from statekeeper.kafka.adapter import producer_config

BOOTSTRAP_OPTION = "kafka.bootstrap.servers"
_QUEUE_FULL_WAIT_S = 60.0
_POLL_EVERY = 10_000  # serve delivery callbacks every N sends
_MAX_REPORTED = 5


class OutputProducer:
    """Produces records and reports every failure at :meth:`flush`.

    ``overrides`` are librdkafka settings on top of
    :func:`statekeeper.kafka.adapter.producer_config` (durable, idempotent, batched) and the
    Java-compatible partitioner.
    """

    def __init__(self, bootstrap: str, **overrides: Any) -> None:
        config = producer_config(
            bootstrap,
            **{
                "partitioner": "murmur2_random",
                # Only failures call back: success needs no Python work per record.
                "delivery.report.only.error": True,
                "on_delivery": self._on_delivery,
                **overrides,
            },
        )
        self._producer = Producer(config)
        self._failures: list[str] = []
        self._failed = 0
        self._since_poll = 0
        self.sent = 0

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
        timestamp_ms: int | None = None,
        partition: int | None = None,
    ) -> None:
        """Queue one record; ``value=None`` is a tombstone, ``partition=None`` partitions by
        key (murmur2, like Java)."""
        kwargs: dict[str, Any] = {}
        if headers:
            kwargs["headers"] = headers
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        if partition is not None:
            kwargs["partition"] = partition
        try:
            self._producer.produce(topic, value, key, **kwargs)
        except BufferError:
            self._wait_for_room(topic, value, key, kwargs)
        except KafkaException as exc:
            where = topic if partition is None else f"{topic}[{partition}]"
            raise ProduceError(f"cannot produce to {where}: {exc.args[0].str()}") from exc
        self.sent += 1
        self._since_poll += 1
        if self._since_poll >= _POLL_EVERY:
            self._since_poll = 0
            self._producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued record is acknowledged; raise :class:`ProduceError` if any
        record failed or is still unacknowledged after ``timeout_s``."""
        remaining = self._producer.flush(timeout_s)
        if remaining:
            # Don't let them trickle out after we reported failure: the batch is retried.
            self._producer.purge(in_queue=True, in_flight=False)
            self._producer.poll(0)
        failed, failures = self._failed, self._failures
        self._failed, self._failures = 0, []
        if remaining or failed:
            parts = []
            if remaining:
                parts.append(f"{remaining} record(s) not acknowledged within {timeout_s:g} s")
            if failed:
                parts.append(f"{failed} record(s) failed: " + "; ".join(failures))
            raise ProduceError(
                "producing output failed: " + ", ".join(parts) + " (broker reachable? topic "
                "exists?); the batch is not committed and will be retried"
            )

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is still queued (best effort; call :meth:`flush` to see errors)."""
        self._producer.flush(timeout_s)

    def __len__(self) -> int:
        """Records queued and not yet acknowledged."""
        return len(self._producer)

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            return
        self._failed += 1
        if len(self._failures) < _MAX_REPORTED:
            self._failures.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    def _wait_for_room(
        self, topic: str, value: bytes | None, key: bytes | None, kwargs: dict[str, Any]
    ) -> None:
        deadline = time.monotonic() + _QUEUE_FULL_WAIT_S
        while True:
            self._producer.poll(0.05)
            try:
                self._producer.produce(topic, value, key, **kwargs)
                return
            except BufferError:
                if time.monotonic() > deadline:
                    raise ProduceError(
                        f"the producer queue stayed full for {_QUEUE_FULL_WAIT_S:g} s while "
                        f"producing to {topic!r}: the broker is not acknowledging records"
                    ) from None


def murmur2(data: bytes) -> int:
    """Kafka's Java ``Utils.murmur2`` (signed 32-bit result)."""
    m, r, mask = 0x5BD1E995, 24, 0xFFFFFFFF
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    end = length - length % 4
    for i in range(0, end, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = (h * m) & mask
        h ^= k
    tail = length % 4
    if tail == 3:
        h ^= data[end + 2] << 16
    if tail >= 2:
        h ^= data[end + 1] << 8
    if tail >= 1:
        h ^= data[end]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def murmur2_partition(key: bytes, num_partitions: int) -> int:
    """The partition a Java producer (and :class:`OutputProducer`) picks for ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


# --- Spark writer --------------------------------------------------------------------------

_BYTES_TYPES = (BinaryType, StringType)
_HEADERS_TYPE = ArrayType(
    StructType().add("key", StringType()).add("value", BinaryType())
).simpleString()


@dataclass(frozen=True)
class SinkOptions:
    """Validated writer options and which optional columns the DataFrame has."""

    bootstrap: str
    topic: str | None
    timeout_s: float = 30.0
    kafka_overrides: dict[str, str] = field(default_factory=dict)
    columns: tuple[str, ...] = ()


def parse_sink_options(options: Mapping[str, str], schema: StructType) -> SinkOptions:
    """Check the options and the DataFrame's columns; errors name the option or column."""
    opts = {str(k).lower(): v for k, v in options.items()}
    bootstrap = (opts.get(BOOTSTRAP_OPTION) or "").strip()
    if not bootstrap:
        raise ConfigError(f"option {BOOTSTRAP_OPTION!r} is required to write to Kafka")
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise ConfigError(
            "writing to Kafka needs a 'value' column (binary or string; null = tombstone)"
        )
    for name in ("key", "value"):
        if name in types and not isinstance(types[name], _BYTES_TYPES):
            raise ConfigError(
                f"column {name!r} must be binary or string, got {types[name].simpleString()}"
            )
    topic = (opts.get("topic") or "").strip() or None
    if topic is None and not isinstance(types.get("topic"), StringType):
        raise ConfigError(
            "no topic to write to: add a string column 'topic' or set option 'topic'"
        )
    if "partition" in types and not isinstance(
        types["partition"], IntegerType | LongType | ShortType
    ):
        raise ConfigError(
            f"column 'partition' must be an integer, got {types['partition'].simpleString()}"
        )
    if "headers" in types and types["headers"].simpleString() != _HEADERS_TYPE:
        raise ConfigError(
            f"column 'headers' must be {_HEADERS_TYPE}, got {types['headers'].simpleString()}"
        )
    if "timestamp" in types and not isinstance(types["timestamp"], TimestampType):
        raise ConfigError(
            f"column 'timestamp' must be a timestamp, got {types['timestamp'].simpleString()}"
        )
    raw_timeout = opts.get("timeoutseconds")
    try:
        timeout_s = float(raw_timeout) if raw_timeout else 30.0
    except ValueError:
        raise ConfigError(
            f"option 'timeoutSeconds' must be a number, got {raw_timeout!r}"
        ) from None
    used = ("key", "value", "topic", "partition", "headers", "timestamp")
    return SinkOptions(
        bootstrap=bootstrap,
        topic=topic,
        timeout_s=timeout_s,
        kafka_overrides={
            key[len("kafka.") :]: value
            for key, value in sorted(opts.items())
            if key.startswith("kafka.") and key != BOOTSTRAP_OPTION
        },
        columns=tuple(c for c in used if c in types),
    )


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    """What one Spark task wrote."""

    records: int = 0


def write_arrow_batches(options: SinkOptions, batches: Iterator[Any]) -> int:
    """Produce every row of ``batches`` (pyarrow RecordBatches) and flush; returns the count.

    Raises :class:`ProduceError` if any record was not acknowledged.
    """
    producer = OutputProducer(options.bootstrap, **options.kafka_overrides)
    count = 0
    try:
        for batch in batches:
            count += _send_batch(producer, options, batch)
        producer.flush(options.timeout_s)
    finally:
        producer.close(0)
    return count


def _send_batch(producer: OutputProducer, options: SinkOptions, batch: Any) -> int:
    import pyarrow as pa

    n = batch.num_rows
    present = set(batch.schema.names)

    def column(name: str) -> list[Any]:
        if name not in present or name not in options.columns:
            return [None] * n
        return batch.column(name).to_pylist()

    keys = [k.encode() if isinstance(k, str) else k for k in column("key")]
    values = [v.encode() if isinstance(v, str) else v for v in column("value")]
    topics = [options.topic] * n if options.topic else column("topic")
    partitions = column("partition")
    headers = [
        [(h["key"], h["value"]) for h in hs] if hs else None for hs in column("headers")
    ]
    if "timestamp" in present and "timestamp" in options.columns:
        micros = batch.column("timestamp").cast(pa.int64()).to_pylist()
        stamps = [None if us is None else us // 1000 for us in micros]
    else:
        stamps = [None] * n
    send = producer.send
    for topic, key, value, hdrs, ts, part in zip(
        topics, keys, values, headers, stamps, partitions, strict=True
    ):
        if topic is None:
            raise ConfigError("a row has a null 'topic' and no 'topic' option is set")
        send(topic, key, value, hdrs, ts, part)
    return n


class KafkaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("statekeeper_kafka")``: each Spark task produces its rows."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        return KafkaCommitMessage(write_arrow_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Records are durable once flushed; nothing left to do."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Kafka cannot take records back; consumers dedupe on retries."""


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("statekeeper_kafka")``: at-least-once per micro-batch."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        return KafkaCommitMessage(write_arrow_batches(self.options, iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Records are durable once flushed; nothing left to do."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Kafka cannot take records back; consumers dedupe on retries."""
