"""A driver for the cluster tests, run as ``python -m tests.cluster.probe_driver MASTER DIR``.

It builds its session the way an app does (``StatekeeperApp._spark`` with ``spark_master``
set, as ``statekeeper app run --set spark_master=...`` does), waits for two executors, runs
one Spark job whose Python workers report who they are, prints that as one JSON line, and
keeps the application (its executors) running until a line arrives on stdin.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from statekeeper.app.spec import load_app_spec
from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.app.topics import TopicPlan
from statekeeper.settings import StatekeeperSettings
from statekeeper.testing.app_process import spark_app_spec


def who_am_i(_partition: Any) -> Any:
    """Runs in a Python worker on an executor."""
    import os
    import time

    from statekeeper.cluster.executor import EXECUTOR_STATE_DIR_ENV, current_executor

    time.sleep(0.3)  # so both executors get tasks
    executor = current_executor()
    yield {
        "executor": executor.executor_id,
        "executor_pid": executor.jvm_pid,
        "python_pid": os.getpid(),
        "python": sys.executable,
        "state_dir": os.environ.get(EXECUTOR_STATE_DIR_ENV),
    }


def main(master: str, work: Path) -> None:
    settings = StatekeeperSettings(
        application_id="cluster-probe",
        spark_master=master,
        state_dir=work / "state",
        checkpoint_dir=work / "checkpoints",
        status_port=None,
    )
    topology = load_app_spec(spark_app_spec("word_count")).build_topology()
    app = StatekeeperApp(topology, settings, spark_conf={"spark.executor.memory": "512m"})
    app._plan = TopicPlan(partitions={"lines": 2}, tasks=[])  # what _prepare would find
    spark = app._spark()
    context = spark.sparkContext
    deadline = time.monotonic() + 60
    # The driver counts as one entry of the executors' memory status.
    while context._jsc.sc().getExecutorMemoryStatus().size() < 3:
        if time.monotonic() > deadline:
            raise SystemExit("two executors did not register within 60 s")
        time.sleep(0.2)
    seen = context.parallelize(range(8), 8).mapPartitions(who_am_i).collect()
    print(
        json.dumps({"master": context.master, "app_name": context.appName, "workers": seen}),
        flush=True,
    )
    sys.stdin.readline()
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
