"""Process environment Spark needs before its JVM starts, and the confs statekeeper sets on
its streaming sessions, in one place.

Spark's Python workers and the streaming data-source planner are separate processes: they
must run this interpreter and find the ``statekeeper`` package (an editable install is not
always visible to them), and everything binds to loopback by default.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

#: The directory that contains the ``statekeeper`` package (``include/`` in a checkout).
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])

#: Spark confs for a session whose streaming checkpoints live on the local disk. Spark's
#: default checkpoint manager renames through Hadoop's FileContext, which forks a
#: ``readlink`` process per file and its checksum; measured here, that is 40-100 ms of each
#: micro-batch's offset-log and commit-log writes. The FileSystem-based manager renames in
#: process, and a rename on a local disk is atomic, which is all the logs need.
LOCAL_CHECKPOINT_CONF = {
    "spark.sql.streaming.checkpointFileManagerClass": (
        "org.apache.spark.sql.execution.streaming.checkpointing."
        "FileSystemBasedCheckpointFileManager"
    ),
}

#: How pyspark launches its JVM from a plain Python process (``statekeeper app run``, tests).
#: It names the JVM a "pyspark-shell", and spark-submit turns the console progress bar on for
#: shells: the JVM then starts with ``spark.ui.showConsoleProgress=true``, which a session's
#: defaults do not override. Saying ``false`` on the launch command keeps stage bars off.
QUIET_GATEWAY_SUBMIT_ARGS = "--conf spark.ui.showConsoleProgress=false pyspark-shell"


def prepare_spark_env() -> dict[str, str]:
    """Set SPARK_LOCAL_IP, PYSPARK_PYTHON/DRIVER_PYTHON, PYTHONPATH and PYSPARK_SUBMIT_ARGS
    unless already set; call it before the first SparkContext starts the JVM.

    Returns the Spark confs that carry the same into executors.
    """
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", QUIET_GATEWAY_SUBMIT_ARGS)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if PACKAGE_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, *paths])
    return {"spark.executorEnv.PYTHONPATH": os.environ["PYTHONPATH"]}


#: Spark loggers kept below WARN in a session statekeeper starts. Under a backlog every
#: micro-batch outlasts the trigger interval and ProcessingTimeExecutor warns each time; the
#: app's own line per batch already gives the batch's duration.
QUIET_SPARK_LOGGERS = {
    "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor": "ERROR",
}


def quiet_spark_logs(spark: Any) -> None:
    """Spark's logs at WARN, and the per-batch warnings of :data:`QUIET_SPARK_LOGGERS` off."""
    context = spark.sparkContext
    context.setLogLevel("WARN")
    log4j = context._jvm.org.apache.logging.log4j
    for name, level in QUIET_SPARK_LOGGERS.items():
        log4j.core.config.Configurator.setLevel(name, log4j.Level.toLevel(level))


def batch_session(master: str = "local[2]", app_name: str = "statekeeper") -> tuple[Any, bool]:
    """The active SparkSession, or a new loopback-bound batch session on ``master`` (and
    whether it was made here, so the caller stops it), with statekeeper's sources registered.
    For the ops commands' Spark reads (``audit --spark``, ``drill --spark``)."""
    from pyspark.sql import SparkSession

    from statekeeper.spark.kafka_source import register_sources

    spark = SparkSession.getActiveSession()
    made_here = spark is None
    if spark is None:
        builder = SparkSession.builder.master(master).appName(app_name)
        for key, value in {
            **prepare_spark_env(),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.shuffle.partitions": "4",
        }.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        quiet_spark_logs(spark)
    register_sources(spark)
    return spark, made_here
