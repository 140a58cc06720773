"""What ``statekeeper drill --spark`` checks word_count's store with: the PySpark SQL
recomputation of :mod:`spark_apps.word_count.reference_spark`, whose word counts map one to
one onto the count store (str word -> int count)."""

from __future__ import annotations

from typing import Any

from statekeeper.kafka.model import KafkaRecord
from statekeeper.ops.drill.spark_check import SparkStoreModel
from statekeeper.recompute.spark_frames import records_to_dataframe

from . import reference_spark


def spark_models(params: dict[str, Any]) -> list[SparkStoreModel]:
    """Models for a word_count app built with ``params`` (the spec's topology params)."""

    def counts(spark: Any, records: list[KafkaRecord]) -> dict[str, int]:
        counts_df, _ = reference_spark.frames(records_to_dataframe(spark, records))
        return {row["word"]: int(row["count"]) for row in counts_df.collect()}

    return [
        SparkStoreModel(
            store=params.get("store", "word-counts"),
            inputs=(params.get("input_topic", "lines"),),
            expected=counts,
            name="PySpark SQL word count",
        )
    ]
