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


def prepare_spark_env() -> dict[str, str]:
    """Set SPARK_LOCAL_IP, PYSPARK_PYTHON/DRIVER_PYTHON and PYTHONPATH unless already set.

    Returns the Spark confs that carry the same into executors.
    """
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if PACKAGE_ROOT not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([PACKAGE_ROOT, *paths])
    return {"spark.executorEnv.PYTHONPATH": os.environ["PYTHONPATH"]}
