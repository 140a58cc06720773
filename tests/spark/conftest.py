"""One local[2] SparkSession for all Spark tests, with statekeeper's sources registered.

Spark binds to loopback and runs Python workers (and the streaming planner process) with
this interpreter; ``include/`` is put on PYTHONPATH so both find statekeeper.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import moto_s3  # noqa: F401 (the fixture, for S3 snapshots)

INCLUDE = str(Path(__file__).resolve().parents[2] / "include")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if INCLUDE not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([INCLUDE, *paths])

    from pyspark.sql import SparkSession

    from statekeeper.spark.kafka_source import register_sources

    session = (
        SparkSession.builder.master("local[2]")
        .appName("statekeeper-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register_sources(session)
    yield session
    session.stop()
