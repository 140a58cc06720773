"""Records as the DataFrame a Spark batch recomputation reads, without a broker.

A Spark recomputation of an app (``spark_apps/<app>/reference_spark.py``) reads a DataFrame
with the columns of Spark's JVM Kafka source (``key`` binary, ``value`` binary, ``topic``,
``partition``, ``offset``, ``timestamp``, ...), as the ``statekeeper_kafka`` data source
loads it from a topic; :func:`records_to_dataframe` builds the same DataFrame from records
in memory, for tests and drills.

pyspark is imported lazily: this module is only imported where Spark runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statekeeper.recompute.grouping import RecordsInput, by_task

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


def records_to_dataframe(spark: SparkSession, records: RecordsInput) -> DataFrame:
    """A DataFrame with the JVM Kafka source's schema holding ``records``."""
    from pyspark.sql import functions as F

    rows: list[tuple[Any, ...]] = [
        (
            r.key,
            r.value,
            r.topic,
            r.partition,
            r.offset,
            r.timestamp_ms,
            0,
            [(k, v) for k, v in r.headers],
        )
        for _, task in by_task(records)
        for r in task
    ]
    raw = spark.createDataFrame(
        rows,
        "key binary, value binary, topic string, partition int, offset long, ts long, "
        "timestampType int, headers array<struct<key: string, value: binary>>",
    )
    return raw.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        F.timestamp_millis("ts").alias("timestamp"),
        "timestampType",
        "headers",
    )


def value_text() -> Column:
    """The record value as a string column (invalid UTF-8 stays detectable with
    ``is_valid_utf8``)."""
    from pyspark.sql import functions as F

    return F.col("value").cast("string")
