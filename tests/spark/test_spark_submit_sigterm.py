"""SIGTERM to ``spark-submit``: word_count launched through the real spark-submit binary, the
signal sent to the spark-submit pid only (the driver JVM, parent of the Python driver).

With the JVM stop hook (statekeeper.spark.jvm_shutdown) the app finishes its batch, commits
and stops cleanly before Spark's shutdown hooks stop the SparkContext; without it
(``jvm_shutdown_wait_s=0``) the Python driver dies under the running batch.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark
import pytest

from spark_apps.word_count import reference
from spark_apps.word_count.generator import word_count_lines
from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.app.store_reader import read_store
from statekeeper.generate.producer import produce
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.spark.jvm_shutdown import (
    install_graceful_stop_hook,
    jvm_is_parent,
    register_stop_hook,
)
from statekeeper.testing.app_process import SPARK_APPS
from tests.e2e.harness import AppUnderTest

SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"
PARTITIONS = 4
LINES = 3_000  # at 400 records per batch (50 per partition), a backlog outlasts the signal
pytestmark = [pytest.mark.timeout(300), pytest.mark.xdist_group("spark_submit_sigterm")]


class SubmittedApp:
    """word_count launched with ``spark-submit`` in its own session; its status file and log."""

    def __init__(self, app: AppUnderTest, name: str, **settings: Any) -> None:
        self.app = app
        self.log_path = app.workdir / f"{name}.log"
        overrides = {**app.overrides, **settings}
        cmd = [str(SPARK_SUBMIT), "--master", "local[2]", str(SPARK_APPS / "word_count/app.py")]
        cmd += ["--spec", str(app.spec_path)]
        for key, value in overrides.items():
            cmd += ["--set", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
        env = {
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
        Path(overrides["status_file"]).unlink(missing_ok=True)
        self.status_file = Path(overrides["status_file"])
        with self.log_path.open("wb") as log:
            # Its own session: cleanup can kill the group; the test signals the pid only.
            self.proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )

    def status(self) -> dict[str, Any]:
        try:
            return json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return {}

    def holding(self) -> bool:
        """Whether batches run and a counting task holds a batch it has not committed (the
        commit interval is long): a stop that does not commit leaves it uncommitted."""
        assert self.proc.poll() is None, f"spark-submit exited early:\n{self.log()}"
        return _holding(self.status())

    def wait_for_final_status(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self.status().get("state") not in ("ERROR", "NOT_RUNNING"):
            assert time.monotonic() < deadline, self.status()
            time.sleep(0.1)

    def sigterm_and_wait(self, timeout_s: float = 90) -> tuple[int, float]:
        """SIGTERM the spark-submit pid (the JVM; not its group); its exit code and seconds."""
        started = time.monotonic()
        os.kill(self.proc.pid, signal.SIGTERM)
        code = self.proc.wait(timeout_s)
        return code, time.monotonic() - started

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


def _word_count(broker: Any, tmp_path: Path) -> tuple[AppUnderTest, str]:
    suffix = uuid.uuid4().hex[:6]
    topic = f"lines-{suffix}"
    produce(broker.bootstrap_servers, topic, word_count_lines(LINES, seed=7), partitions=PARTITIONS)
    app = AppUnderTest.create(
        "word_count",
        broker.bootstrap_servers,
        tmp_path,
        suffix,
        {"input_topic": topic, "output_topic": f"word-counts-{suffix}"},
        # Small batches under a backlog and a long commit interval: when the signal comes,
        # the counting tasks hold uncommitted batches that only a graceful stop commits.
        max_records_per_batch=400,
        commit_interval_ms=600_000,
        trigger_interval_ms=100,
    )
    return app, topic


def _counting_tasks(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tasks of the counting subtopology that have run (they hold the word counts)."""
    tasks = status.get("tasks", {}).items()
    return {tid: t for tid, t in tasks if tid.startswith("1_") and "last_batch_id" in t}


def _holding(status: dict[str, Any]) -> bool:
    """Whether batches run and a counting task has not committed the last batch it ran."""
    batches = (status.get("throughput") or {}).get("batches", 0)
    uncommitted = [
        t for t in _counting_tasks(status).values() if t["committed_batch_id"] != t["last_batch_id"]
    ]
    return batches >= 2 and bool(uncommitted)


@dataclass
class Stopped:
    """One spark-submit run stopped by SIGTERM: its app, exit code, seconds, status and log."""

    app: AppUnderTest
    topic: str
    code: int
    seconds: float
    status: dict[str, Any]
    log: str


@pytest.fixture(scope="module")
def sigterm_runs(broker: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Stopped]:
    """word_count under spark-submit with the stop hook and without it
    (``jvm_shutdown_wait_s=0``), both started at once (the two JVMs start in parallel), each
    SIGTERMed once a counting task holds an uncommitted batch."""
    variants = {"hook": {}, "no_hook": {"jvm_shutdown_wait_s": 0}}
    started: dict[str, tuple[AppUnderTest, str, SubmittedApp]] = {}
    stopped: dict[str, Stopped] = {}
    try:
        for name, settings in variants.items():
            app, topic = _word_count(broker, tmp_path_factory.mktemp(name))
            started[name] = (app, topic, SubmittedApp(app, name, **settings))
        pending = dict(started)
        deadline = time.monotonic() + 240
        while pending:
            for name, (app, topic, submitted) in list(pending.items()):
                if submitted.holding():
                    code, seconds = submitted.sigterm_and_wait()
                    if name == "no_hook":  # the orphaned Python driver writes its last status
                        submitted.wait_for_final_status(30)
                    status, log = submitted.status(), submitted.log()
                    stopped[name] = Stopped(app, topic, code, seconds, status, log)
                    print(f"{name}: spark-submit exited {code} {seconds:.1f}s after SIGTERM")
                    del pending[name]
            assert time.monotonic() < deadline, {n: r[2].log() for n, r in pending.items()}
            time.sleep(0.05)
    finally:
        for _app, _topic, submitted in started.values():
            submitted.kill()
    return stopped


def test_sigterm_to_spark_submit_finishes_the_batch_and_commits(
    sigterm_runs: dict[str, Stopped], broker: Any, spark: Any
) -> None:
    run = sigterm_runs["hook"]
    assert run.code == 128 + signal.SIGTERM, run.log  # the JVM ended by the signal
    status = run.status
    assert status.get("state") == "NOT_RUNNING" and status.get("error") is None, run.log
    assert "app stopped" in run.log and "after the JVM's shutdown began" in run.log, run.log

    # Every counting task committed the last batch it ran (the stop's own commit: the
    # interval never came due), and input was left for the restart.
    last = status["last_batch"]["batch_id"]
    counting = _counting_tasks(status)
    assert counting and max(t["last_batch_id"] for t in counting.values()) == last
    assert all(t["committed_batch_id"] == t["last_batch_id"] for t in counting.values()), counting
    # Whether input is left for the restart depends on how fast the batches ran before the
    # signal (records_processed counts the repartitioned words too, so it is no measure of
    # the lines read): the restart below checks the state either way.

    # The restart drains the rest (in larger batches) with nothing to replay; the counts
    # are exact.
    app = run.app
    settings = app.settings.model_copy(update={"max_records_per_batch": 100_000})
    restarted = StatekeeperApp(app.spec.build_topology(), settings)
    restarted.run(stop_when_idle=True, idle_s=1.0)
    assert restarted.board.snapshot()["totals"]["records_replayed"] == 0
    expected = reference.recompute(read_topic(broker.bootstrap_servers, run.topic))
    counts = read_store(app.settings, app.spec.build_topology(), "word-counts", PARTITIONS)
    assert counts == expected.counts


def test_without_the_hook_sigterm_to_spark_submit_kills_the_batch(
    sigterm_runs: dict[str, Stopped],
) -> None:
    """The same signal with the hook off: Spark stops the context under the driver, which
    ends in ERROR with a counting task's batches uncommitted, what the test above would
    report."""
    run = sigterm_runs["no_hook"]
    assert "after the JVM's shutdown began" not in run.log
    assert run.status["state"] == "ERROR" and run.status["error"], run.status
    counting = _counting_tasks(run.status)
    assert any(t["committed_batch_id"] != t["last_batch_id"] for t in counting.values()), counting


def test_no_stop_hook_when_python_is_the_jvms_parent(spark: Any) -> None:
    """In this process Python started the JVM: a SIGTERM reaches Python first, and its own
    handler stops the app, so nothing is registered in the JVM."""
    assert not jvm_is_parent(spark.sparkContext._jvm)
    assert install_graceful_stop_hook(spark, lambda: None, 30.0) is None


def test_stop_hook_registers_runs_and_unregisters_in_the_jvm(spark: Any) -> None:
    """The hook as Hadoop's shutdown-hook manager sees it: registered, run from the JVM (a
    py4j callback that asks for the stop and waits for the release), removed by close()."""
    manager = spark.sparkContext._jvm.org.apache.hadoop.util.ShutdownHookManager.get()
    stops: list[float] = []
    installed = register_stop_hook(spark, lambda: stops.append(time.monotonic()), 5.0)
    assert manager.hasShutdownHook(installed.java_hook)
    threading.Timer(0.3, installed.hook.release).start()  # "the app stopped"
    started = time.monotonic()
    installed.java_hook.run()  # what the JVM's shutdown calls: back into this process
    assert installed.hook.ran and len(stops) == 1
    assert 0.2 < time.monotonic() - started < 4.0  # it waited for the release, not wait_s
    installed.hook.ran = False  # as if no shutdown had called it: close() unregisters
    installed.close()
    assert not manager.hasShutdownHook(installed.java_hook)
