"""Spark DataFrame writer to Kafka (format ``statekeeper_kafka``, batch and streaming).

Takes the columns of Spark's Kafka sink: ``value`` (binary or string, null = tombstone),
optional ``key`` (binary or string, nullable), ``topic`` (string, or the ``topic`` option,
which wins like in Spark), optional ``partition`` (int), optional ``headers``
(array<struct<key string, value binary>>) and optional ``timestamp``. Options:
``kafka.bootstrap.servers``, ``topic``, ``timeoutSeconds`` and other ``kafka.*`` keys as
librdkafka producer settings. Records go through :class:`OutputProducer`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

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

from statekeeper.errors import ConfigError
from statekeeper.processing.output_producer import OutputProducer
from statekeeper.spark.offset_planning import BOOTSTRAP_OPTION

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
        raise ConfigError("no topic to write to: add a string column 'topic' or set option 'topic'")
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
    headers = [[(h["key"], h["value"]) for h in hs] if hs else None for hs in column("headers")]
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
