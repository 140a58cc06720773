"""What ``statekeeper drill --spark`` checks word_count v2's store with: a PySpark SQL
recomputation over the whole input (v1's DLQ and word rules: the lines' words, per word its
occurrences and the timestamp of the first line it occurs in).

What is checkable. v2's state usually began as v1's, migrated (``first_seen_ms`` None:
v1 did not record it), and the recomputation reads the whole input, which v1 and v2
processed together, without knowing where v2 took over. So per word:

- ``count`` is checked exactly: every occurrence of the word in the input the restored state
  covers, whichever version counted it;
- ``first_seen_ms`` is only checked to be None (counted before the upgrade) or an int no
  earlier than the word's first line in the whole input: which of the two it must be depends
  on the takeover, which the model does not see.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statekeeper.kafka.model import KafkaRecord
from statekeeper.ops.drill.spark_check import SparkStoreModel
from statekeeper.recompute.spark_frames import records_to_dataframe, value_text

from .topology import WORD_RE

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def words_frame(df: DataFrame) -> DataFrame:
    """``[word, count, first_seen_ms]`` of a DataFrame of the lines topic (null and
    non-UTF-8 values are dead letters, as in v1)."""
    from pyspark.sql import functions as F

    valid = df.where(F.col("value").isNotNull() & F.is_valid_utf8(value_text()))
    split = F.regexp_extract_all(F.lower(value_text()), F.lit(WORD_RE.pattern), 0)
    words = valid.select(
        F.explode(split).alias("word"), F.unix_millis("timestamp").alias("ts")
    ).where(F.col("word") != "")
    return words.groupBy("word").agg(
        F.count("*").alias("count"), F.min("ts").alias("first_seen_ms")
    )


def agrees(expected: dict[str, Any], restored: Any) -> bool:
    """A restored entry against the recomputed one (module docstring): the same count, and
    ``first_seen_ms`` None or not before the word's first line."""
    if not isinstance(restored, dict) or restored.get("count") != expected["count"]:
        return False
    first = restored.get("first_seen_ms")
    if first is None:
        return True
    return type(first) is int and first >= expected["first_seen_ms"]


def spark_models(params: dict[str, Any]) -> list[SparkStoreModel]:
    """Models for a word_count v2 app built with ``params`` (the spec's topology params)."""

    def counts(spark: Any, records: list[KafkaRecord]) -> dict[str, dict[str, Any]]:
        rows = words_frame(records_to_dataframe(spark, records)).collect()
        return {
            row["word"]: {"count": int(row["count"]), "first_seen_ms": int(row["first_seen_ms"])}
            for row in rows
        }

    return [
        SparkStoreModel(
            store=params.get("store", "word-counts"),
            inputs=(params.get("input_topic", "lines"),),
            expected=counts,
            name="PySpark SQL word count (count exact; first_seen_ms None or not before the "
            "word's first line)",
            agrees=agrees,
        )
    ]
