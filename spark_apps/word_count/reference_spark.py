"""Spark batch recomputation of word_count: the Python reference model in DataFrame terms.

Reads a DataFrame of the ``lines`` topic with the JVM Kafka source's columns (the
``statekeeper_kafka`` data source, or
:func:`~statekeeper.recompute.spark_frames.records_to_dataframe`) and agrees with
:mod:`spark_apps.word_count.reference` (tests check that).
pyspark is imported lazily: this module is only imported where Spark runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from statekeeper.recompute.spark_frames import value_text

from . import reference

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_TP = ["topic", "partition"]


def frames(df: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(counts[word, count], dlq[topic, partition, offset, reason])`` of the lines topic."""
    from pyspark.sql import functions as F

    text = value_text()
    reason = (
        F.when(F.col("value").isNull(), F.lit(reference.DLQ_NULL_VALUE))
        .when(~F.is_valid_utf8(text), F.lit(reference.DLQ_INVALID_UTF8))
        .otherwise(F.lit(None).cast("string"))
    )
    classified = df.withColumn("reason", reason)
    split = F.regexp_extract_all(F.lower(value_text()), F.lit(reference.WORD_PATTERN.pattern), 0)
    words = classified.where(F.col("reason").isNull()).select(F.explode(split).alias("word"))
    counts = words.groupBy("word").count()
    dlq = classified.where(F.col("reason").isNotNull()).select(*_TP, "offset", "reason")
    return counts, dlq


def recompute(df: DataFrame) -> reference.WordCountResult:
    """:func:`frames`, collected into a :class:`WordCountResult`."""
    counts_df, dlq_df = frames(df)
    result = reference.WordCountResult()
    result.counts = {row["word"]: int(row["count"]) for row in counts_df.collect()}
    result.words = sum(result.counts.values())
    for row in dlq_df.orderBy(*_TP, "offset").collect():
        position = (row["topic"], int(row["partition"]), int(row["offset"]))
        result.dlq.append(position)
        result.dlq_reasons[position] = row["reason"]
    result.records = df.count()
    return result
