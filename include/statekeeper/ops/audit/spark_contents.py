"""Measure a changelog's contents with a Spark batch read (``audit changelogs --spark``).

The same counts as :func:`statekeeper.ops.audit.contents.measure_changelog`, read through
the ``statekeeper_kafka`` data source (whole topic, log start to log end, never sampled) and
aggregated by Spark: one pass, one row back to the driver. pyspark is imported only here.
"""

from __future__ import annotations

from typing import Any

from statekeeper.changelog.records import RESERVED_KEY_PREFIX
from statekeeper.ops.audit.contents import ChangelogContents


def spark_session(master: str = "local[2]") -> tuple[Any, bool]:
    """The session ``audit --spark`` reads with (see :func:`batch_session`)."""
    from statekeeper.spark.session_env import batch_session

    return batch_session(master, "statekeeper-audit")


def measure_changelog_spark(
    spark: Any, bootstrap: str, topic: str, *, timeout_s: float = 30.0
) -> ChangelogContents:
    """Records, distinct keys (markers excluded), tombstones and markers of ``topic``."""
    from pyspark.sql import functions as F

    frame = (
        spark.read.format("statekeeper_kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("timeoutSeconds", str(timeout_s))
        .load()
    )
    # Commit markers and epoch begin records (changelog.fencing) share the reserved prefix.
    is_marker = F.substring(F.col("key"), 1, len(RESERVED_KEY_PREFIX)) == F.lit(RESERVED_KEY_PREFIX)
    row = frame.agg(
        F.count(F.lit(1)).alias("records"),
        F.count(F.when(is_marker, 1)).alias("markers"),
        F.count(F.when(~is_marker & F.col("value").isNull(), 1)).alias("tombstones"),
        F.countDistinct(F.when(~is_marker, F.col("key"))).alias("distinct_keys"),
    ).collect()[0]
    records = int(row["records"])
    return ChangelogContents(
        records=records,
        records_read=records,
        distinct_keys=int(row["distinct_keys"]),
        tombstones=int(row["tombstones"]),
        markers=int(row["markers"]),
        sampled=False,
    )
