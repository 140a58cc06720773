"""PySpark Python data sources over Kafka (confluent-kafka), batch and streaming.

``statekeeper_kafka`` yields rows with exactly the schema of Spark's JVM Kafka source
(:data:`KAFKA_SCHEMA`), as Arrow record batches built column by column. One Spark
partition per topic-partition with data reads its offset range with
:mod:`statekeeper.kafka.range_reader`.

``statekeeper_kafka_ranges`` plans the same offsets but reads nothing: each row is one
non-empty range ``(topic, partition, start_offset, end_offset)`` and the consumer of the
rows (the stateful runtime, R2 in docs/invariants.md) reads the records itself. Its Spark partitions
hold the ranges of one partition number, so co-partitioned topics arrive together.

Options (Spark passes the keys lower-cased; see
:func:`~statekeeper.spark.offset_planning.parse_source_options`):
``kafka.bootstrap.servers`` (required), ``subscribe`` (required, comma list),
``startingOffsets`` (``earliest`` | ``latest`` | JSON; streams default to ``latest``, batch
to ``earliest``), ``endingOffsets`` (batch: ``latest`` | JSON), ``maxRecordsPerBatch`` or
Spark's ``maxOffsetsPerTrigger`` (streaming admission control, fair share across
partitions), ``stopAtOffsets`` (streams: JSON offsets no micro-batch reads past, for a
bounded run), ``timeoutSeconds``, and any other ``kafka.*`` key as a librdkafka consumer
setting.

Offsets in Spark's checkpoint are ``{"topic": {"0": 12}}`` dicts in sorted order: Spark
compares them as JSON text. End offsets are true log ends (partition EOF), correct on
brokers whose high watermark is not (docs/brokers.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from functools import cached_property
from operator import methodcaller
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from statekeeper.errors import ConfigError, StatekeeperError
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.model import OffsetRange
from statekeeper.kafka.offsets import LogEndReader, log_start_offsets
from statekeeper.kafka.range_reader import iter_partition_runs
from statekeeper.spark.batch_limit import read_batch_limit
from statekeeper.spark.offset_planning import (
    LATEST,
    TP,
    SourceOptions,
    cap_offsets,
    offsets_from_dict,
    offsets_to_dict,
    parse_source_options,
    plan_batch_end,
)

SOURCE_NAME = "statekeeper_kafka"
RANGES_SOURCE_NAME = "statekeeper_kafka_ranges"

#: Spark's JVM Kafka source schema (with headers), field for field.
KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
    ]
)

RANGES_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("start_offset", LongType()),
        StructField("end_offset", LongType()),
    ]
)

_GROUP_ID = "statekeeper-source"
#: Per process and connection config (see KafkaPlanner).
_ADMINS: dict[str, Any] = {}
_END_READERS: dict[str, LogEndReader] = {}


# --- input partitions ----------------------------------------------------------------------


class KafkaRangePartition(InputPartition):
    """One topic-partition's offsets ``[start, end)`` (row source)."""

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.range = offset_range


class KafkaRangesPartition(InputPartition):
    """The ranges of one partition number across the subscribed topics (ranges source)."""

    def __init__(self, ranges: list[OffsetRange]) -> None:
        super().__init__(ranges)
        self.ranges = ranges


# --- the broker side of planning -----------------------------------------------------------


class KafkaPlanner:
    """Partition discovery and offset lookups for one set of source options (driver side).

    Its Kafka clients live in this module, one per connection config and process, not in
    the planner: planners stay picklable, and the streaming source runner, which asks for
    partitions and log ends before every micro-batch, does not connect anew each time
    (that cost 50-100 ms per batch, measured).
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    @cached_property
    def consumer_conf(self) -> dict[str, Any]:
        return consumer_config(
            self.options.bootstrap, group_id=_GROUP_ID, **self.options.kafka_overrides
        )

    @cached_property
    def _client_key(self) -> str:
        return json.dumps(
            [self.options.bootstrap, self.options.kafka_overrides, self.options.timeout_s],
            sort_keys=True,
            default=str,
        )

    def topic_partitions(self) -> list[TP]:
        """Every partition of the subscribed topics; a missing topic is a ConfigError."""
        from statekeeper.kafka.admin import make_admin, partition_count

        admin = _ADMINS.get(self._client_key)
        if admin is None:
            admin = make_admin(self.options.bootstrap, **self.options.kafka_overrides)
            _ADMINS[self._client_key] = admin
        tps: list[TP] = []
        try:
            for topic in self.options.topics:
                count = partition_count(admin, topic, timeout_s=self.options.timeout_s)
                if count is None:
                    raise ConfigError(
                        f"option 'subscribe': topic {topic!r} does not exist on "
                        f"{self.options.bootstrap}; create it first or fix the name"
                    )
                tps.extend((topic, p) for p in range(count))
        except Exception:
            _ADMINS.pop(self._client_key, None)  # the next call starts with a fresh client
            raise
        return sorted(tps)

    def earliest(self, tps: Sequence[TP]) -> dict[TP, int]:
        return log_start_offsets(self.consumer_conf, tps, self.options.timeout_s)

    def latest(self, tps: Sequence[TP]) -> dict[TP, int]:
        reader = _END_READERS.get(self._client_key)
        if reader is None:
            reader = LogEndReader(self.consumer_conf, self.options.timeout_s)
            _END_READERS[self._client_key] = reader
        return reader.read(tps)

    def ranges(self, start: dict[TP, int], end: dict[TP, int]) -> list[OffsetRange]:
        """Non-empty ranges from ``start`` to ``end``; a partition missing from ``start``
        (created after the query started) starts at its log start."""
        new = [tp for tp in end if tp not in start]
        begin = {**self.earliest(new), **start} if new else start
        return [
            OffsetRange(t, p, begin[(t, p)], stop)
            for (t, p), stop in sorted(end.items())
            if stop > begin[(t, p)]
        ]


# --- streaming -----------------------------------------------------------------------------


class _StreamPlanning(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets of a stream: initial, latest under a read limit, available-now target."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.planner = KafkaPlanner(options)
        self._target: dict[TP, int] | None = None
        self._available: dict[TP, int] | None = None
        self._last: dict | None = None

    def initialOffset(self) -> dict:
        tps = self.planner.topic_partitions()
        spec = self.options.starting
        earliest = self.planner.earliest(tps) if spec.kind != "latest" else {}
        latest = self.planner.latest(tps) if spec.kind != "earliest" else {}
        return offsets_to_dict(spec.resolve(tps, earliest, latest))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records_per_batch is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_records_per_batch)

    def prepareForTriggerAvailableNow(self) -> None:
        # Trigger.AvailableNow: never plan past what exists now.
        self._target = self.planner.latest(self.planner.topic_partitions())

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        if start is None:  # the pre-4.2 call without arguments
            start = self._last if self._last is not None else self.initialOffset()
        begin = offsets_from_dict(start, "start offset")
        tps = self.planner.topic_partitions()
        new = [tp for tp in tps if tp not in begin]
        if new:
            begin.update(self.planner.earliest(new))
        available = self.planner.latest(tps)
        self._check_no_data_loss(begin, available)
        self._available = dict(available)
        if self._target is not None:
            target = self._target
            available = {tp: min(end, target.get(tp, begin[tp])) for tp, end in available.items()}
        # A bounded stream (stopAtOffsets) runs dry at its stop offsets.
        available = cap_offsets(available, self.options.stop_at)
        end = plan_batch_end(begin, available, self._max_rows(limit))
        self._last = offsets_to_dict(end)
        return self._last

    def reportLatestOffset(self) -> dict | None:
        return offsets_to_dict(self._available) if self._available else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges = self.planner.ranges(
            offsets_from_dict(start, "start offset"), offsets_from_dict(end, "end offset")
        )
        return self._input_partitions(ranges)

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint (and the stores' metadata)."""

    def _input_partitions(self, ranges: list[OffsetRange]) -> list[InputPartition]:
        raise NotImplementedError

    def _max_rows(self, limit: ReadLimit | None) -> int | None:
        if limit is None:
            ceiling = self.options.max_records_per_batch
        elif isinstance(limit, ReadMaxRows):
            ceiling = int(limit.max_rows)
        else:
            return None  # ReadAllAvailable (Trigger.Once) and limits we cannot apply
        chosen = None
        if self.options.batch_limit_file is not None:
            chosen = read_batch_limit(self.options.batch_limit_file)
        if chosen is None:
            return ceiling
        return chosen if ceiling is None else min(chosen, ceiling)

    @staticmethod
    def _check_no_data_loss(begin: dict[TP, int], available: dict[TP, int]) -> None:
        behind = sorted(tp for tp, end in available.items() if end < begin.get(tp, 0))
        if behind:
            shown = ", ".join(
                f"{t}[{p}] at {available[(t, p)]} < {begin[(t, p)]}" for t, p in behind
            )
            raise StatekeeperError(
                f"the log end of {shown} is below the offset this query already reached: the "
                "topic was deleted/recreated or truncated. Data may be lost; start a new query "
                "(new checkpoint) with explicit startingOffsets"
            )


class KafkaStreamReader(_StreamPlanning):
    """Streaming rows of :data:`KAFKA_SCHEMA`; one Spark partition per topic-partition."""

    def _input_partitions(self, ranges: list[OffsetRange]) -> list[InputPartition]:
        return [KafkaRangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range_batches(self.planner.consumer_conf, partition, self.options)


class KafkaRangesStreamReader(_StreamPlanning):
    """Streaming offset ranges (:data:`RANGES_SCHEMA`); reads no records."""

    def _input_partitions(self, ranges: list[OffsetRange]) -> list[InputPartition]:
        return group_ranges_by_partition(ranges)

    def read(self, partition: InputPartition) -> Iterator[tuple[str, int, int, int]]:
        return iter_range_rows(partition)


# --- batch ---------------------------------------------------------------------------------


class _BatchPlanning(DataSourceReader):
    """Offsets of a batch query: ``startingOffsets`` (earliest) to ``endingOffsets`` (latest)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.planner = KafkaPlanner(options)

    def plan_ranges(self) -> list[OffsetRange]:
        tps = self.planner.topic_partitions()
        ending = self.options.ending
        earliest = self.planner.earliest(tps)  # one ListOffsets request
        needs_end = ending.kind == "latest" or LATEST in ending.offsets.values()
        latest = self.planner.latest(tps) if needs_end else {}
        start = self.options.starting.resolve(tps, earliest, latest)
        end = ending.resolve(tps, earliest, latest)
        return [
            OffsetRange(t, p, start[(t, p)], end[(t, p)])
            for t, p in tps
            if end[(t, p)] > start[(t, p)]
        ]

    def partitions(self) -> Sequence[InputPartition]:
        return self._input_partitions(self.plan_ranges())

    def _input_partitions(self, ranges: list[OffsetRange]) -> list[InputPartition]:
        raise NotImplementedError


class KafkaBatchReader(_BatchPlanning):
    """Batch rows of :data:`KAFKA_SCHEMA`; one Spark partition per topic-partition."""

    def _input_partitions(self, ranges: list[OffsetRange]) -> list[InputPartition]:
        return [KafkaRangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range_batches(self.planner.consumer_conf, partition, self.options)


class KafkaRangesBatchReader(_BatchPlanning):
    """Batch offset ranges (:data:`RANGES_SCHEMA`); reads no records."""

    def _input_partitions(self, ranges: list[OffsetRange]) -> list[InputPartition]:
        return group_ranges_by_partition(ranges)

    def read(self, partition: InputPartition) -> Iterator[tuple[str, int, int, int]]:
        return iter_range_rows(partition)


# --- rows ----------------------------------------------------------------------------------


def group_ranges_by_partition(ranges: list[OffsetRange]) -> list[InputPartition]:
    """One input partition per partition number (co-partitioned topics stay together)."""
    by_number: dict[int, list[OffsetRange]] = {}
    for r in sorted(ranges, key=lambda r: (r.partition, r.topic)):
        by_number.setdefault(r.partition, []).append(r)
    return [KafkaRangesPartition(group) for _, group in sorted(by_number.items())]


def iter_range_rows(partition: InputPartition) -> Iterator[tuple[str, int, int, int]]:
    """The rows of a :class:`KafkaRangesPartition` (Spark passes a bare InputPartition when
    there is nothing to read)."""
    for r in getattr(partition, "ranges", ()):
        yield (r.topic, r.partition, r.start, r.end)


_ARROW_SCHEMA: pa.Schema | None = None

_key = methodcaller("key")
_value = methodcaller("value")
_offset = methodcaller("offset")
_timestamp = methodcaller("timestamp")
_headers = methodcaller("headers")


def kafka_arrow_schema() -> pa.Schema:
    """The Arrow schema Spark expects for :data:`KAFKA_SCHEMA` (as Spark derives it)."""
    global _ARROW_SCHEMA
    if _ARROW_SCHEMA is None:
        _ARROW_SCHEMA = to_arrow_schema(KAFKA_SCHEMA, timezone="UTC")
    return _ARROW_SCHEMA


def read_range_batches(
    consumer_conf: dict[str, Any], partition: InputPartition, options: SourceOptions
) -> Iterator[pa.RecordBatch]:
    """Arrow batches of every record of a :class:`KafkaRangePartition`, in offset order
    (Spark passes a bare InputPartition when there is nothing to read)."""
    offset_range = getattr(partition, "range", None)
    if offset_range is None:
        return
    for (topic, number), msgs in iter_partition_runs(
        consumer_conf, [offset_range], options.timeout_s
    ):
        yield messages_to_arrow(topic, number, msgs)


def messages_to_arrow(topic: str, partition: int, msgs: list[Any]) -> pa.RecordBatch:
    """One partition's consumed messages as a record batch of :data:`KAFKA_SCHEMA`.

    ``timestampType`` follows Kafka's Java ids (-1 none, 0 create time, 1 log append time);
    ``headers`` is null when a record has none, like the JVM source.
    """
    schema = kafka_arrow_schema()
    n = len(msgs)
    stamps = list(map(_timestamp, msgs))
    millis = pa.array([ms for _, ms in stamps], pa.int64())
    columns = [
        pa.array(list(map(_key, msgs)), schema.field("key").type),
        pa.array(list(map(_value, msgs)), schema.field("value").type),
        pa.array([topic] * n, schema.field("topic").type),
        pa.array([partition] * n, schema.field("partition").type),
        pa.array(list(map(_offset, msgs)), schema.field("offset").type),
        pc.multiply(millis, 1000).cast(schema.field("timestamp").type),
        # confluent_kafka: 0 none, 1 create, 2 log append; Java: -1, 0, 1.
        pa.array([kind - 1 for kind, _ in stamps], schema.field("timestampType").type),
        pa.array(list(map(_headers, msgs)), schema.field("headers").type),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


# --- data sources --------------------------------------------------------------------------


def _check_schema(schema: StructType | None, expected: StructType, name: str) -> None:
    if schema is not None and schema.simpleString() != expected.simpleString():
        raise ConfigError(
            f"source {name!r} has a fixed schema {expected.simpleString()}; do not pass "
            f"another one (got {schema.simpleString()})"
        )


class KafkaDataSource(DataSource):
    """``statekeeper_kafka``: read Kafka rows (batch/stream) and write DataFrames to Kafka."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType:
        return KAFKA_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema, KAFKA_SCHEMA, SOURCE_NAME)
        return KafkaBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema, KAFKA_SCHEMA, SOURCE_NAME)
        return KafkaStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from statekeeper.spark.kafka_sink import KafkaBatchWriter, parse_sink_options

        return KafkaBatchWriter(parse_sink_options(self.options, schema))

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from statekeeper.spark.kafka_sink import KafkaStreamWriter, parse_sink_options

        return KafkaStreamWriter(parse_sink_options(self.options, schema))


class KafkaRangesDataSource(DataSource):
    """``statekeeper_kafka_ranges``: offset ranges to read, one row per non-empty range."""

    @classmethod
    def name(cls) -> str:
        return RANGES_SOURCE_NAME

    def schema(self) -> StructType:
        return RANGES_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        _check_schema(schema, RANGES_SCHEMA, RANGES_SOURCE_NAME)
        return KafkaRangesBatchReader(parse_source_options(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        _check_schema(schema, RANGES_SCHEMA, RANGES_SOURCE_NAME)
        return KafkaRangesStreamReader(parse_source_options(self.options, streaming=True))


def register_sources(spark: Any) -> None:
    """Register ``statekeeper_kafka`` (read + write) and ``statekeeper_kafka_ranges``."""
    spark.dataSource.register(KafkaDataSource)
    spark.dataSource.register(KafkaRangesDataSource)
