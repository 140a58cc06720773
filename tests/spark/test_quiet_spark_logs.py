"""A session statekeeper starts logs at WARN without Spark's per-batch warnings."""

from __future__ import annotations

from typing import Any

from statekeeper.spark.session_env import QUIET_SPARK_LOGGERS, quiet_spark_logs


def test_quiet_spark_logs_sets_warn_and_silences_per_batch_loggers(spark: Any) -> None:
    log4j = spark.sparkContext._jvm.org.apache.logging.log4j
    try:
        quiet_spark_logs(spark)
        assert log4j.LogManager.getRootLogger().getLevel().toString() == "WARN"
        for name, level in QUIET_SPARK_LOGGERS.items():
            assert log4j.LogManager.getLogger(name).getLevel().toString() == level
    finally:
        spark.sparkContext.setLogLevel("ERROR")  # what the shared test session uses
