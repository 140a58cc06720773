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

#: Spark confs for an app whose executors run on other hosts (any non-local master): how
#: soon the driver gives up on an executor that stopped answering — a host frozen (SIGSTOP,
#: a suspended VM), partitioned or dead without closing its connections — so its tasks move
#: to another executor. Spark's defaults take 2-3 minutes: an executor counts as lost after
#: ``spark.network.timeout`` (120 s) without a heartbeat, checked only every
#: ``spark.network.timeoutInterval`` (60 s). Here:
#:
#: * ``spark.executor.heartbeatInterval`` 2 s (Spark: 10 s): ten heartbeats per timeout, so
#:   a few late ones (a GC pause, a busy machine) never look like a lost executor;
#: * ``spark.storage.blockManagerHeartbeatTimeoutMs`` 20 s: the heartbeat timeout itself
#:   (Spark uses ``spark.network.timeout`` when it is unset);
#: * ``spark.network.timeoutInterval`` 2 s: how often the driver looks for expired
#:   executors (must not exceed the timeout);
#: * ``spark.network.timeout`` 60 s (Spark: 120 s): RPC asks, connection and fetch timeouts.
#:   It bounds how long anything waits on a frozen peer (an RPC to its executor, a block
#:   fetched from it) and stays 3x the heartbeat timeout, above any stall a healthy executor
#:   has.
#:
#: Measured on the two-worker local cluster (``tests/cluster/freeze_timing.py``, docs/runtime.md
#: "Frozen hosts"): the executor of a frozen host was dropped 19-21 s after SIGSTOP and the
#: held-up batch completed on the survivor by 21-22 s; with Spark's defaults 85-108 s (the
#: master's worker timeout; the driver's own heartbeat timeout alone: 120-180 s).
#: ``spark.task.maxFailures`` stays at Spark's 4: a lost executor fails each of its Spark
#: tasks once, and every micro-batch is a new job. The standalone master's own timeout
#: (``spark.worker.timeout``) is a master/worker setting: see
#: :class:`statekeeper.cluster.local_cluster.ClusterConfig`.
CLUSTER_FAILOVER_CONF = {
    "spark.executor.heartbeatInterval": "2s",
    "spark.storage.blockManagerHeartbeatTimeoutMs": "20s",
    "spark.network.timeoutInterval": "2s",
    "spark.network.timeout": "60s",
}


def failover_conf(master: str) -> dict[str, str]:
    """:data:`CLUSTER_FAILOVER_CONF` for a cluster master; nothing for ``local[...]``, whose
    only executor is the driver itself (no heartbeat to lose)."""
    from statekeeper.spark.master import is_local_master

    return {} if is_local_master(master) else dict(CLUSTER_FAILOVER_CONF)


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
            **failover_conf(master),
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
