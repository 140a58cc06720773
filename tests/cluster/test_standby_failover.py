"""One standby per task on the two-worker cluster: the active task's worker is killed.

word_count runs with ``num_standby_replicas=1`` and a query server on each executor (and,
in make test-chaos, word_count_sqlite: the same with its counts in a custom engine). Once the
standbys have caught up, a tail of input goes in and the worker running the tasks is killed
with SIGKILL. The tasks resume on the other worker from its standby copies, replaying only
the changelog records the standbys had not applied (asserted small, and reported); point
queries sent to the surviving executor all the while are answered, by its standby copy with
a lag figure until the tasks are active there; the standby listener events (update start,
batch loaded, suspended as promoted) reach the driver. The killed worker then comes back,
its executor gets standby copies, and once they are caught up tasks move back to it one at a
time (a balancing move, replaying next to nothing). The final store equals an independent
recomputation.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest

from spark_apps.word_count import reference as wc_ref
from spark_apps.word_count.generator import word_count_lines
from statekeeper.app.store_reader import read_store
from statekeeper.generate.producer import produce
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.query.client import QueryClient
from statekeeper.testing.cluster_watch import (
    QueryLoop,
    drained_as_last_seen,
    placement,
    query_url,
    standbys_caught_up,
    tasks_of,
    wait_drained,
    worker_of,
)
from tests.e2e.harness import AppUnderTest

PARTITIONS = 2
STORE = "word-counts"

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.xdist_group("spark_cluster"),
    pytest.mark.timeout(600),
]


def _batches(status: dict[str, Any]) -> int:
    return int((status.get("throughput") or {}).get("batches", 0))


def _counting(status: dict[str, Any]) -> dict[str, Any]:
    """Placements of the tasks holding the word counts (subtopology 1)."""
    return tasks_of(status, "1_")


def _promoted(status: dict[str, Any]) -> bool:
    events = placement(status).get("standby_events") or []
    return any(e["event"] == "update_suspended" and e["reason"] == "promoted" for e in events)


def _balanced(status: dict[str, Any]) -> bool:
    """Both executors run tasks again, after at least one balancing move (a stateless task
    moves freely; a stateful one only onto a caught-up standby copy)."""
    tasks = placement(status).get("tasks") or {}
    executors = {p["executor"] for p in tasks.values()}
    moves = placement(status).get("moves_by_reason") or {}
    return len(executors) == 2 and moves.get("balance (caught-up standby)", 0) >= 1


# The same failover with the counts in a custom engine (SQLite, docs/custom-stores.md):
# standby copies, promotion and queries go through its supplier. make test-chaos only.
@pytest.mark.parametrize(
    "app_name", ["word_count", pytest.param("word_count_sqlite", marks=pytest.mark.chaos)]
)
def test_task_resumes_from_its_standby_and_queries_are_served_during_failover(
    broker, spark_cluster, tmp_path, app_name
) -> None:
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    topic, out = f"lines-{suffix}", f"word-counts-{suffix}"
    produce_lines = lambda lines: produce(bootstrap, topic, lines, partitions=PARTITIONS)  # noqa: E731
    lines = list(word_count_lines(40_000, seed=5))
    base, tail, rest = lines[:20_000], lines[20_000:20_400], lines[20_400:]
    app = AppUnderTest.create(
        app_name,
        bootstrap,
        tmp_path,
        suffix,
        {"input_topic": topic, "output_topic": out},
        spark_master=spark_cluster.master_url,
        num_standby_replicas=1,
        query_port=0,
        max_records_per_batch=5_000,
        commit_interval_ms=500,
        trigger_interval_ms=200,
    )
    produce_lines(base)
    proc = app.process(0, stop_when_idle=False).start()
    querier: QueryLoop | None = None
    try:
        ready = proc.wait_for(lambda s: standbys_caught_up(s, "1_"), 300)
        tasks = _counting(ready)
        actives = [p["executor"] for p in tasks.values()]
        active = max(set(actives), key=actives.count)
        moving = sorted(t for t, p in tasks.items() if p["executor"] == active)
        survivor = next(s for p in tasks.values() for s in p["standbys"] if s != active)
        assert all(tasks[t]["standbys"] == [survivor] for t in moving), tasks

        # Keys of the tasks that will move, asked at the survivor, which holds their standbys.
        expected_base = wc_ref.recompute(read_topic(bootstrap, topic)).counts
        topology = app.spec.build_topology()
        url = query_url(ready, survivor)
        probe = QueryClient(url)
        keys = [k for k in sorted(expected_base) if probe.metadata(STORE, k)["task"] in moving][:50]
        assert keys, "no key of the moving tasks"
        querier = QueryLoop(url, STORE, keys)
        querier.start()
        time.sleep(1.0)

        produce_lines(tail)
        time.sleep(0.5)
        killed_at = time.time()
        spark_cluster.kill_worker(worker_of(spark_cluster, active))
        proc.wait_for(
            lambda s: (
                drained_as_last_seen(s)
                and all((_counting(s).get(t) or {}).get("executor") == survivor for t in moving)
            ),
            180,
        )
        time.sleep(1.0)
        querier.stop_event.set()
        querier.join(30)

        # Executors report with each batch's results: input in small chunks until the
        # survivor's report of the promotion has reached the driver.
        chunks = [rest[i : i + 100] for i in range(0, len(rest), 100)]
        while chunks and not _promoted(proc.status() or {}):
            produce_lines(chunks.pop(0))
            time.sleep(0.5)
        # The killed worker comes back: its executor gets standbys, which catch up, and the
        # tasks spread over both executors again, moved to caught-up copies one at a time.
        victim = worker_of(spark_cluster, active)
        spark_cluster.restart_worker(victim)
        while chunks and not _balanced(proc.status() or {}):
            produce_lines(chunks.pop(0))
            time.sleep(0.5)
        produce_lines([r for chunk in chunks for r in chunk])
        final = wait_drained(proc, bootstrap)
        balanced = _balanced(final)
        proc.terminate()
        assert proc.wait(120) == 0, (app.workdir / "run0.log").read_text()[-4000:]
    finally:
        if querier is not None:
            querier.stop_event.set()
        proc.kill9()
    status = proc.status() or final

    # The moved tasks resumed from the standby copies: only the tail was replayed.
    restores = {t: (status.get("tasks") or {}).get(t, {}).get("restore") or [] for t in moving}
    print(f"moved {moving} from executor {active} to {survivor}; restores {json.dumps(restores)}")
    # Each tail line updates at most one count and one dedupe entry per word.
    tail_bound = 2 * sum(len((r.value or b"").split()) + 1 for r in tail)
    for task in moving:
        counts = [r for r in restores[task] if r["store"] == STORE]
        assert counts and counts[0]["source"] == "local state", restores[task]
        assert counts[0]["records"] <= tail_bound, (task, counts, tail_bound)
    placed = placement(status)
    assert any(
        r["cause"] == "moved" and r["source"] == "local state" for r in placed["restores"]
    ), placed["restores"]
    assert placed["moves_by_reason"].get("to standby", 0) >= len(moving), placed

    # Queries during the failover: every one answered; the standby's answers carry a lag.
    answers = querier.answers
    assert answers, "no query ran"
    failed = [(t, s, b) for t, s, b in answers if s != 200]
    assert not failed, failed[:5]
    standby = [b for t, _, b in answers if b.get("source") == "standby"]
    during = [b for t, _, b in answers if t >= killed_at and b.get("source") == "standby"]
    assert standby and all(isinstance(b.get("lag"), int) for b in standby), standby[:3]
    assert during, "no standby answer after the kill"
    late = [b for t, _, b in answers if b.get("source") == "active"]
    assert late, "the survivor never answered as the active copy"
    print(
        f"{len(answers)} queries: {len(standby)} by the standby "
        f"(lags {sorted({b['lag'] for b in standby})}), {len(late)} by the active copy"
    )

    # Standby listener events reached the driver.
    events = placed.get("standby_events") or []
    kinds = {e["event"] for e in events}
    assert {"update_start", "batch_loaded"} <= kinds, kinds
    promoted = [e for e in events if e["event"] == "update_suspended" and e["reason"] == "promoted"]
    assert promoted, [e for e in events if e["event"] == "update_suspended"]
    assert all("current_end_offset" in e for e in events if e["event"] == "batch_loaded")

    # The restarted worker's executor got work back through caught-up standbys.
    assert balanced, placement(final)

    expected = wc_ref.recompute(read_topic(bootstrap, topic))
    fresh = app.settings.model_copy(
        update={"state_dir": tmp_path / "rebuilt", "restore_from_snapshots": False}
    )
    assert read_store(fresh, topology, STORE, PARTITIONS) == expected.counts
