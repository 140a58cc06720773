"""The shipped apps on a two-worker Spark standalone cluster, one worker killed at random.

Each worker has its own state directory, as separate hosts have. While input streams in, a
random worker is killed with SIGKILL (its whole process group: Worker JVM, the app's
executor JVM and its Python workers) ``STATEKEEPER_CLUSTER_KILLS`` times (2 in ``make
test``, 10 in ``make test-chaos``) and restarted. Spark loses the executor; the driver places
its tasks on the surviving executor, which restores them (snapshot + tail, or the changelog);
when the worker is back, tasks that return there find a stale copy, which is caught up from
the changelog, never reused as it was. At the end every store, rebuilt from its changelog, and
every executor's local copy of the tasks it runs equal an independent recomputation, and the
tasks' executor ids show they moved.
"""

from __future__ import annotations

import json
import os
import random
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from spark_apps.patient_monitoring import reference as pm_ref
from spark_apps.patient_monitoring.generator import patient_events
from spark_apps.word_count import reference as wc_ref
from spark_apps.word_count.generator import word_count_lines
from statekeeper.app.store_reader import read_store
from statekeeper.generate.producer import produce
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.state.environment import StateEnvironment
from statekeeper.testing.cluster_watch import executors_of_worker, wait_drained
from tests.e2e.harness import AppUnderTest

KILLS = int(os.environ.get("STATEKEEPER_CLUSTER_KILLS", "2"))
PARTITIONS = 4

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.xdist_group("spark_cluster"),
    pytest.mark.timeout(300 + 60 * KILLS),
]


def _seed() -> int:
    seed = int(os.environ.get("STATEKEEPER_E2E_SEED", random.randrange(1 << 30)))
    print(f"cluster seed {seed}, {KILLS} worker kills (STATEKEEPER_E2E_SEED={seed})")
    return seed


def _executors(status: dict[str, Any]) -> list[str]:
    return list((status.get("placement") or {}).get("executors") or [])


def _run_with_worker_kills(
    app: AppUnderTest, cluster: Any, records: list, topic: str, seed: int
) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, set[str]]]:
    """Run ``app`` on ``cluster`` while ``records`` go in chunk by chunk; kill a random
    worker ``KILLS`` times, each time while the app works through a fresh chunk, and give
    the survivor another chunk. Returns the final status, the kills and every executor each
    task ran on."""
    rng = random.Random(seed)
    bootstrap = app.overrides["bootstrap_servers"]
    first, rest = records[: len(records) // 4], records[len(records) // 4 :]
    size = -(-len(rest) // (2 * KILLS + 1))
    chunks = [rest[i : i + size] for i in range(0, len(rest), size)]

    def feed() -> None:
        if chunks:
            produce(bootstrap, topic, chunks.pop(0), partitions=PARTITIONS)

    produce(bootstrap, topic, first, partitions=PARTITIONS)
    proc = app.process(0, stop_when_idle=False).start()
    kills: list[dict[str, Any]] = []
    ran_on: dict[str, set[str]] = {}

    def watch(status: dict[str, Any]) -> None:
        for task, info in (status.get("tasks") or {}).items():
            if info.get("executor"):
                ran_on.setdefault(task, set()).add(str(info["executor"]))

    try:
        proc.wait_for(lambda s: _batches(s) >= 1, 240)
        for k in range(KILLS):
            status = proc.wait_for(lambda s: len(_executors(s)) >= 2, 180)
            watch(status)
            feed()  # the kill lands while the app works through it
            done = _batches(status)
            proc.wait_for(lambda s, b=done: _batches(s) > b, 120)
            time.sleep(rng.uniform(0.0, 2.0))
            before = proc.status() or {}
            watch(before)
            # A worker whose executor runs tasks (after a kill every task may sit on one).
            active = {p.get("executor") for p in _placements(before).values()}
            victims = [w.index for w in cluster.workers if executors_of_worker(w) & active]
            victim = rng.choice(victims or [0, 1])
            cluster.kill_worker(victim)
            feed()  # the surviving executor takes the tasks over and works through more
            done = _batches(before)
            after = proc.wait_for(lambda s, b=done: _batches(s) >= b + 2, 180)
            watch(after)
            kills.append(
                {
                    "kill": k,
                    "worker": victim,
                    "executors_before": _executors(before),
                    "executors_after": _executors(after),
                    "moves_total": (after.get("placement") or {}).get("moves_total"),
                }
            )
            cluster.restart_worker(victim)
        proc.wait_for(lambda s: len(_executors(s)) >= 2, 180)
        while chunks:
            feed()
        wait_drained(proc, bootstrap)
        watch(proc.status() or {})
        proc.terminate()
        code = proc.wait(120)
        assert code == 0, (app.workdir / "run0.log").read_text()[-4000:]
    finally:
        proc.kill9()
    status = proc.status() or {}
    watch(status)
    return status, kills, ran_on


def _placements(status: dict[str, Any]) -> dict[str, Any]:
    return (status.get("placement") or {}).get("tasks") or {}


def _batches(status: dict[str, Any]) -> int:
    return int((status.get("throughput") or {}).get("batches", 0))


def _local_copies(app: AppUnderTest, cluster: Any, status: dict[str, Any], store: str) -> dict:
    """Each task's store as its final executor holds it locally, opened read-only; asserts
    the copy needed no changelog record to reach the last commit (it is current)."""
    topology = app.spec.build_topology()
    placement = (status.get("placement") or {}).get("tasks") or {}
    merged: dict[Any, Any] = {}
    checked = 0
    for worker in cluster.workers:
        settings = app.settings.model_copy(update={"state_dir": Path(worker.state_dir)})
        env = StateEnvironment(settings, read_only=True)
        try:
            for task, where in placement.items():
                sub, partition = (int(x) for x in task.split("_"))
                specs = topology.store_specs(sub)
                if store not in {s.name for s in specs}:
                    continue
                if not (Path(worker.state_dir) / app.app_id / task).is_dir():
                    continue
                if where.get("executor") not in executors_of_worker(worker):
                    continue
                state = env.task(task, partition, specs)
                outcomes = state.open()
                try:
                    # The running copy was current: nothing left to replay to its last commit.
                    assert all(o.restored_records == 0 for o in outcomes), (task, outcomes)
                    merged.update(state.store(store).all())
                    checked += 1
                finally:
                    state.close()
        finally:
            env.close()
    assert checked, "no local copy was checked"
    return merged


def _fresh(app: AppUnderTest, tmp_path: Path) -> Any:
    return app.settings.model_copy(
        update={"state_dir": tmp_path / "rebuilt", "restore_from_snapshots": False}
    )


def _assert_moved(status: dict[str, Any], ran_on: dict[str, set[str]], kills: list) -> None:
    placement = status.get("placement") or {}
    assert placement.get("moves_total", 0) >= 1, f"no task moved: {json.dumps(kills)}"
    moved = {t for t, executors in ran_on.items() if len(executors) > 1}
    assert moved, f"every task stayed on one executor: {ran_on}"
    causes = {(r["cause"], r["source"]) for r in placement.get("restores") or []}
    assert any(cause == "moved" for cause, _ in causes), causes
    print(f"moves {placement.get('moves_by_reason')}; restores {placement.get('restores')}")
    print(f"stale copies closed {placement.get('stale_copies_closed')}; ran on {ran_on}")


def test_word_count_on_two_workers_is_exact_after_worker_kills(
    broker, spark_cluster, tmp_path
) -> None:
    seed = _seed()
    suffix = uuid.uuid4().hex[:6]
    topic, out = f"lines-{suffix}", f"word-counts-{suffix}"
    app = AppUnderTest.create(
        "word_count",
        broker.bootstrap_servers,
        tmp_path,
        suffix,
        {"input_topic": topic, "output_topic": out},
        spark_master=spark_cluster.master_url,
        max_records_per_batch=500,
        commit_interval_ms=1_000,
        trigger_interval_ms=200,
    )
    records = list(word_count_lines(4_000 + 1_000 * KILLS, seed=seed))
    status, kills, ran_on = _run_with_worker_kills(app, spark_cluster, records, topic, seed)
    print(f"word_count worker kills: {json.dumps(kills)}")
    assert status["state"] == "NOT_RUNNING"
    _assert_moved(status, ran_on, kills)

    expected = wc_ref.recompute(read_topic(broker.bootstrap_servers, topic))
    topology = app.spec.build_topology()
    rebuilt = read_store(_fresh(app, tmp_path), topology, "word-counts", PARTITIONS)
    assert rebuilt == expected.counts, f"kills: {json.dumps(kills)}"
    assert _local_copies(app, spark_cluster, status, "word-counts") == expected.counts


@pytest.mark.chaos
def test_patient_monitoring_on_two_workers_is_exact_after_worker_kills(
    broker, spark_cluster, tmp_path
) -> None:
    seed = _seed()
    suffix = uuid.uuid4().hex[:6]
    topic = f"patient-events-{suffix}"
    alerts, heart_rate = f"patient-alerts-{suffix}", f"heart-rate-{suffix}"
    app = AppUnderTest.create(
        "patient_monitoring",
        broker.bootstrap_servers,
        tmp_path,
        suffix,
        {"input_topic": topic, "alerts_topic": alerts, "heart_rate_topic": heart_rate},
        spark_master=spark_cluster.master_url,
        max_records_per_batch=1_000,
        commit_interval_ms=1_000,
        trigger_interval_ms=200,
    )
    events = patient_events(patients=24, minutes=10 + 2 * KILLS, seed=seed, malformed_share=0.01)
    status, kills, ran_on = _run_with_worker_kills(app, spark_cluster, events, topic, seed)
    print(f"patient worker kills: {json.dumps(kills)}")
    assert status["state"] == "NOT_RUNNING"
    _assert_moved(status, ran_on, kills)

    expected = pm_ref.recompute(read_topic(broker.bootstrap_servers, topic))
    topology = app.spec.build_topology()
    fresh = _fresh(app, tmp_path)
    assert read_store(fresh, topology, "pulse-counts", PARTITIONS) == expected.pulse_windows
    assert read_store(fresh, topology, "heart-rate", PARTITIONS) == expected.heart_rate
