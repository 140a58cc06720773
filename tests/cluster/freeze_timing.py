"""How long a frozen host holds up an app on the two-worker cluster: a measurement, not a test.

    python -m tests.cluster.freeze_timing --mode new --freezes 3
    python -m tests.cluster.freeze_timing --mode spark-defaults --freezes 2

Starts an embedded broker and a ``LocalSparkCluster`` (127.0.0.1 only), runs word_count on
it with input fed in small paced chunks, and ``--freezes`` times: waits until the victim's
Python worker is busy with a batch, freezes the victim's host (SIGSTOP of every process of
the worker), and measures from the SIGSTOP

* ``lost_s``: until the driver's log says the executor is lost (heartbeat timeout, or the
  standalone master dropping the worker);
* ``moved_s``: until the app's status shows the driver's new assignment without it;
* ``batch_s``: until the first batch completes after that (the one the freeze held up,
  finished on the survivor);

then thaws it and waits for both executors again. ``--mode new``: the app runs with
``CLUSTER_FAILOVER_CONF`` and the cluster with ``spark.worker.timeout`` 20 s (statekeeper's
defaults); ``spark-defaults``: neither (Spark's 120 s / 60 s / 10 s / 60 s). Prints one
JSON document. Every process it starts is stopped (and thawed) on the way out.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from spark_apps.word_count.generator import word_count_lines
from statekeeper.changelog.records import changelog_topic
from statekeeper.cluster.local_cluster import ClusterConfig, LocalSparkCluster
from statekeeper.generate.producer import produce
from statekeeper.kafka.embedded import EmbeddedBroker
from statekeeper.spark.session_env import CLUSTER_FAILOVER_CONF
from statekeeper.testing.cluster_watch import (
    executor_lost_lines,
    executors_of_worker,
    follow_after_thaw,
    moved_off,
    python_workers,
    stateful_prefixes,
    wait_python_busy,
)
from tests.cluster.test_host_freeze import (
    _batches,
    _executors,
    _warm_on,
    _with_spark_conf,
    marker_regressions,
)
from tests.e2e.harness import AppUnderTest

PARTITIONS = 4


class Feeder(threading.Thread):
    """Produces ``lines`` in chunks of ``chunk`` every ``pause_s`` until stopped (from the
    start again when through)."""

    def __init__(self, bootstrap: str, topic: str, lines: list, chunk: int, pause_s: float):
        super().__init__(daemon=True)
        self.args = (bootstrap, topic)
        self.lines, self.chunk, self.pause_s = lines, chunk, pause_s
        self.stop_event = threading.Event()

    def run(self) -> None:
        at = 0
        while not self.stop_event.wait(self.pause_s):
            produce(*self.args, self.lines[at : at + self.chunk], partitions=PARTITIONS)
            at = (at + self.chunk) % len(self.lines)


def measure(mode: str, freezes: int, work: Path) -> dict[str, Any]:
    new = mode == "new"
    results: list[dict[str, Any]] = []
    with EmbeddedBroker() as broker:
        config = ClusterConfig(
            base_dir=work / "cluster",
            workers=2,
            memory_per_worker="1g",
            worker_timeout_s=20 if new else None,
        )
        with LocalSparkCluster(config) as cluster:
            suffix = uuid.uuid4().hex[:6]
            topic = f"lines-{suffix}"
            app = AppUnderTest.create(
                "word_count",
                broker.bootstrap_servers,
                work / "app",
                suffix,
                {"input_topic": topic, "output_topic": f"word-counts-{suffix}"},
                spark_master=cluster.master_url,
                num_standby_replicas=1,
                max_records_per_batch=1_500,
                commit_interval_ms=500,
                trigger_interval_ms=200,
            )
            if new:
                _with_spark_conf(app, CLUSTER_FAILOVER_CONF)
            prefixes = stateful_prefixes(app.spec.build_topology())
            log = app.workdir / "run0.log"
            lines = list(word_count_lines(100_000, seed=11))
            produce(broker.bootstrap_servers, topic, lines[:3_000], partitions=PARTITIONS)
            feeder = Feeder(broker.bootstrap_servers, topic, lines[3_000:], 600, 0.5)
            proc = app.process(0, stop_when_idle=False).start()
            frozen: int | None = None
            try:
                feeder.start()
                for k in range(freezes):
                    before = proc.wait_for(lambda s: len(_executors(s)) >= 2, 300)
                    live = _executors(before)
                    on = {
                        w.index: e
                        for w in cluster.workers
                        for e in executors_of_worker(w)
                        if e in live
                    }
                    warm = [i for i, e in on.items() if _warm_on(before, e, prefixes)]
                    victim = warm[k % len(warm)] if warm else k % 2
                    executor = on[victim]
                    busy = wait_python_busy(cluster, victim, timeout_s=60)
                    offset = log.stat().st_size
                    batches = _batches(proc.status() or before)
                    at = time.monotonic()
                    frozen = victim
                    cluster.freeze_worker(victim)
                    zombies = python_workers(cluster, victim)
                    lost_s = moved_s = batch_s = None
                    deadline = at + 400
                    while time.monotonic() < deadline and batch_s is None:
                        now = time.monotonic() - at
                        status = proc.status() or {}
                        if lost_s is None and executor_lost_lines(log, executor, offset):
                            lost_s = round(now, 1)
                        if moved_s is None and moved_off(status, executor, prefixes):
                            moved_s = round(now, 1)
                        if moved_s is not None and _batches(status) > batches:
                            batch_s = round(now, 1)
                        time.sleep(0.1)
                    cluster.thaw_worker(victim)
                    frozen = None
                    after_thaw = follow_after_thaw(zombies)
                    results.append(
                        {
                            "freeze": k,
                            "worker": victim,
                            "executor": executor,
                            "python_busy_cpu_s": busy,
                            "lost_s": lost_s,
                            "moved_s": moved_s,
                            "batch_s": batch_s,
                            "python_workers_after_thaw": after_thaw,
                            "driver_log": executor_lost_lines(log, executor, offset)[:3],
                        }
                    )
                    print(json.dumps(results[-1]), flush=True)
            finally:
                feeder.stop_event.set()
                if frozen is not None:
                    cluster.thaw_worker(frozen)
                proc.kill9()
            regressions = marker_regressions(
                broker.bootstrap_servers, changelog_topic(app.app_id, "word-counts")
            )
    return {
        "mode": mode,
        "marker_regressions": regressions,
        "app_spark_conf": CLUSTER_FAILOVER_CONF if new else "Spark defaults",
        "spark.worker.timeout": 20 if new else "Spark default (60)",
        "freezes": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["new", "spark-defaults"], default="new")
    parser.add_argument("--freezes", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="freeze-timing-") as work:
        print(json.dumps(measure(args.mode, args.freezes, Path(work)), indent=2))


if __name__ == "__main__":
    main()
