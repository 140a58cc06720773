"""The Java-compatible murmur2 partitioner and the sink's option/column checks (pure)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.types import (  # noqa: E402
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructType,
)

from statekeeper.errors import ConfigError  # noqa: E402
from statekeeper.kafka.partitioning import murmur2  # noqa: E402
from statekeeper.kafka.partitioning import partition_for_key as murmur2_partition  # noqa: E402
from statekeeper.spark.kafka_sink import parse_sink_options  # noqa: E402

# Kafka's own test vectors (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), sorted(JAVA_VECTORS.items()))
def test_murmur2_matches_java(data: bytes, expected: int):
    assert murmur2(data) == expected


def test_partition_is_positive_hash_modulo():
    for key in JAVA_VECTORS:
        for n in (1, 3, 4, 12):
            p = murmur2_partition(key, n)
            assert p == (murmur2(key) & 0x7FFFFFFF) % n and 0 <= p < n


HEADERS = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))


def test_sink_options_accept_kafka_sink_columns():
    schema = (
        StructType()
        .add("key", StringType())
        .add("value", BinaryType())
        .add("topic", StringType())
        .add("partition", IntegerType())
        .add("headers", HEADERS)
        .add("extra", StringType())
    )
    opts = parse_sink_options({"kafka.bootstrap.servers": "h:1", "kafka.linger.ms": "20"}, schema)
    assert opts.topic is None
    assert opts.columns == ("key", "value", "topic", "partition", "headers")
    assert opts.kafka_overrides == {"linger.ms": "20"}


BOOT = {"kafka.bootstrap.servers": "h:1"}


def _value_only() -> StructType:
    return StructType().add("value", BinaryType())  # .add() mutates: build a fresh one


@pytest.mark.parametrize(
    ("options", "schema", "fragment"),
    [
        ({"topic": "t"}, _value_only(), "'kafka.bootstrap.servers' is required"),
        ({**BOOT, "topic": "t"}, StructType().add("key", BinaryType()), "needs a 'value' column"),
        (BOOT, _value_only(), "add a string column 'topic'"),
        (
            {**BOOT, "topic": "t"},
            StructType().add("value", IntegerType()),
            "column 'value' must be binary or string",
        ),
        (
            {**BOOT, "topic": "t"},
            _value_only().add("partition", StringType()),
            "column 'partition' must be an integer",
        ),
        (
            {**BOOT, "topic": "t"},
            _value_only().add("headers", ArrayType(StringType())),
            "column 'headers' must be array<struct<key:string,value:binary>>",
        ),
        ({**BOOT, "topic": "t", "timeoutseconds": "soon"}, _value_only(), "'timeoutSeconds'"),
    ],
)
def test_sink_option_errors_name_the_column_or_option(options, schema, fragment):
    with pytest.raises(ConfigError) as info:
        parse_sink_options(options, schema)
    assert fragment in str(info.value)
