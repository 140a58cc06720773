"""An app run logs quietly: statekeeper at INFO, py4j and other libraries at WARNING only,
and the JVM that pyspark launches keeps Spark's console progress bars off."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from statekeeper.spark.session_env import QUIET_GATEWAY_SUBMIT_ARGS, prepare_spark_env


def test_app_logging_keeps_statekeeper_info_and_drops_py4j_chatter() -> None:
    probe = (
        "import logging\n"
        "from statekeeper.app.launcher import configure_logging\n"
        "configure_logging()\n"
        "logging.getLogger('py4j.clientserver').info('Received command c on object id p0')\n"
        "logging.getLogger('statekeeper.app').info('batch 7: 4 tasks')\n"
        "logging.getLogger('statekeeper.app').debug('details')\n"
        "logging.getLogger('py4j.java_gateway').warning('gateway lost')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    lines = done.stderr.splitlines()
    assert [line.split(" ", 2)[2] for line in lines] == [
        "INFO statekeeper.app: batch 7: 4 tasks",
        "WARNING py4j.java_gateway: gateway lost",
    ]


@pytest.fixture
def clean_spark_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """prepare_spark_env writes os.environ: monkeypatch restores every key it may touch."""
    for key in (
        "PYSPARK_SUBMIT_ARGS",
        "SPARK_LOCAL_IP",
        "PYSPARK_PYTHON",
        "PYSPARK_DRIVER_PYTHON",
        "PYTHONPATH",
    ):
        monkeypatch.setenv(key, "")
        monkeypatch.delenv(key)


@pytest.mark.usefixtures("clean_spark_env")
def test_the_gateway_jvm_starts_without_console_progress_bars() -> None:
    prepare_spark_env()
    assert os.environ["PYSPARK_SUBMIT_ARGS"] == QUIET_GATEWAY_SUBMIT_ARGS
    assert os.environ["PYSPARK_SUBMIT_ARGS"].endswith("pyspark-shell")


@pytest.mark.usefixtures("clean_spark_env")
def test_a_users_submit_args_are_kept() -> None:
    os.environ["PYSPARK_SUBMIT_ARGS"] = "--driver-memory 2g pyspark-shell"
    prepare_spark_env()
    assert os.environ["PYSPARK_SUBMIT_ARGS"] == "--driver-memory 2g pyspark-shell"
