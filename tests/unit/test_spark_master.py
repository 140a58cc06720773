"""Which master an app's session runs on (statekeeper.spark.master): pure decisions."""

from __future__ import annotations

import pytest

from statekeeper.spark.master import (
    executor_python_conf,
    launched_by_jvm,
    master_to_set,
    submit_args_master,
)

CLUSTER = "spark://127.0.0.1:7077"


def test_python_starting_the_jvm_uses_the_settings_master() -> None:
    assert master_to_set(CLUSTER, environ={}) == CLUSTER
    # statekeeper's own quiet launch arguments name no master
    quiet = {"PYSPARK_SUBMIT_ARGS": "--conf spark.ui.showConsoleProgress=false pyspark-shell"}
    assert master_to_set(CLUSTER, environ=quiet) == CLUSTER


def test_spark_submit_keeps_its_master() -> None:
    launched = {"PYSPARK_GATEWAY_PORT": "40000", "PYSPARK_GATEWAY_SECRET": "x"}
    assert launched_by_jvm(launched)
    assert not launched_by_jvm({})
    assert master_to_set(CLUSTER, environ=launched) is None


def test_a_running_context_keeps_its_master() -> None:
    assert master_to_set(CLUSTER, environ={}, context_active=True) is None


@pytest.mark.parametrize(
    ("args", "master"),
    [
        ("--master local[3] pyspark-shell", "local[3]"),
        ("--master=spark://h:1 pyspark-shell", "spark://h:1"),
        ("--conf a=b pyspark-shell", None),
        ("", None),
        (None, None),
    ],
)
def test_submit_args_name_a_master(args: str | None, master: str | None) -> None:
    assert submit_args_master(args) == master
    expected = CLUSTER if master is None else None
    assert master_to_set(CLUSTER, environ={"PYSPARK_SUBMIT_ARGS": args or ""}) == expected


def test_cluster_executors_get_the_drivers_python() -> None:
    conf = executor_python_conf(CLUSTER, "/venv/bin/python")
    assert conf == {
        "spark.pyspark.python": "/venv/bin/python",
        "spark.executorEnv.PYSPARK_PYTHON": "/venv/bin/python",
    }
    for local in ("local", "local[2]", "local[*]", "local[2,3]"):
        assert executor_python_conf(local, "/venv/bin/python") == {}
