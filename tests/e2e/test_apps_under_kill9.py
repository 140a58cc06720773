"""End to end: the shipped apps on Spark, killed with SIGKILL at random moments.

Each app is started ``STATEKEEPER_E2E_KILLS`` times (5 by default; 2 in ``make test``,
20 in ``make test-chaos``; the custom-engine series at least 3) and killed with ``kill -9``
(whole process group: driver JVM and Python workers) at a random moment after its first
micro-batch began; task state directories are deleted along the way; a final run drains
the input. Then every store, the DLQ and the deduplicated outputs are compared with an
independent recomputation from the input topic (statekeeper.recompute, which shares no
code with the runtime).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import uuid
from collections.abc import Callable

import pytest

from spark_apps.patient_monitoring import reference as pm_ref
from spark_apps.patient_monitoring.generator import patient_events
from spark_apps.word_count import reference as wc_ref
from spark_apps.word_count.generator import word_count_lines
from statekeeper.app.store_reader import read_store
from statekeeper.generate.producer import produce
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.processing.dlq import dlq_topic
from statekeeper.processing.output_reader import read_deduped as deduped
from statekeeper.processing.output_reader import source_positions as sources_of
from tests.e2e.harness import AppUnderTest, series_seed

KILLS_PER_APP = int(os.environ.get("STATEKEEPER_E2E_KILLS", "5"))
PARTITIONS = 4
#: Input lines of the word_count series: a few kills (``make test``) need less input to land
#: in the middle of batches than a long series.
WORD_COUNT_LINES = 15_000 if KILLS_PER_APP > 3 else 9_000
#: Records per source per batch: each line makes ~10 repartitioned words, so at 1,000 the
#: final run of a short series spent most of its time in ~90 small batches.
WORD_COUNT_BATCH = 1_000 if KILLS_PER_APP > 3 else 3_000

#: The custom-engine series kills at least this often, also where the others kill less.
SQLITE_KILLS_AT_LEAST = 3

# Whole apps in child processes (the `e2e` tier, `make test-chaos`); each run takes ~20 s, so
# the time limit grows with the number of kills.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(max(600, 60 * (KILLS_PER_APP + 1)))]


def _seed() -> int:
    return series_seed("e2e", KILLS_PER_APP, "STATEKEEPER_E2E_KILLS")


def _drop_a_task_dir(app: AppUnderTest, task_id: str, from_run: int) -> Callable[[int], None]:
    """Delete ``task_id``'s state directory once, after the first kill from ``from_run`` on
    at which it exists; ``app.dropped_at`` records when."""

    def between(run: int) -> None:
        last = run == KILLS_PER_APP - 1  # else the final run must restore it
        if (run >= from_run or last) and app.dropped_at is None and app.remove_task_dir(task_id):
            app.dropped_at = run

    return between


def _feeder(
    bootstrap: str, topic: str, records: list, runs: int = KILLS_PER_APP
) -> Callable[[int], None]:
    """Produce the input in ``runs`` chunks, one before each run: the stream goes
    on while the app is down, so every run has new input to be killed in the middle of."""
    chunk = -(-len(records) // runs)

    def feed(run: int) -> None:
        part = records[run * chunk : (run + 1) * chunk]
        if part:
            produce(bootstrap, topic, part, partitions=PARTITIONS)

    return feed


# ~125 s: make test-chaos only (20 kills). make test keeps a whole-app kill -9 series
# (patient_monitoring, below) and word_count's worker kill and host freeze on the cluster.
@pytest.mark.chaos
def test_word_count_is_exact_after_random_kill9s(broker, tmp_path) -> None:
    bootstrap = broker.bootstrap_servers
    seed = _seed()
    suffix = uuid.uuid4().hex[:6]
    topic, out = f"lines-{suffix}", f"word-counts-{suffix}"
    feed = _feeder(bootstrap, topic, list(word_count_lines(WORD_COUNT_LINES, seed=seed)))
    app = AppUnderTest.create(
        "word_count",
        bootstrap,
        tmp_path,
        suffix,
        {"input_topic": topic, "output_topic": out},
        # Batches capped well below a run's input and a short commit interval: kills land
        # on tasks holding uncommitted batches, which the next run replays.
        max_records_per_batch=WORD_COUNT_BATCH,
        commit_interval_ms=2_000,
    )
    app.kill_at_random_moments(
        KILLS_PER_APP,
        random.Random(seed),
        before=feed,
        between=_drop_a_task_dir(app, "1_2", KILLS_PER_APP // 2),
    )
    status = app.run_to_completion(KILLS_PER_APP)
    print(f"word_count kills: {json.dumps(app.kills)}; task dir dropped after run {app.dropped_at}")
    assert app.dropped_at is not None, "the task directory was never deleted"

    expected = wc_ref.recompute(read_topic(bootstrap, topic))
    topology = app.spec.build_topology()
    counts = read_store(app.settings, topology, "word-counts", PARTITIONS)
    assert counts == expected.counts, f"kills: {json.dumps(app.kills)}"

    dlq = deduped(bootstrap, dlq_topic(app.app_id))
    assert sorted(sources_of(dlq)) == sorted(expected.dlq)

    latest: dict[str, int] = {}
    for record in deduped(bootstrap, out):
        latest[record.key.decode()] = int(record.value)  # type: ignore[union-attr,arg-type]
    assert latest == expected.counts
    assert status["state"] == "NOT_RUNNING"


def test_word_count_in_sqlite_is_exact_after_random_kill9s(broker, tmp_path) -> None:
    """word_count with its counts in a custom store engine (SQLite, spark_apps/
    word_count_sqlite): the same series, snapshots every second, and before the final run two
    task directories deleted: one restored from its snapshot, one (its snapshots deleted too)
    from the changelog alone."""
    bootstrap = broker.bootstrap_servers
    seed = _seed()
    suffix = uuid.uuid4().hex[:6]
    topic, out = f"lines-{suffix}", f"word-counts-{suffix}"
    kills = max(SQLITE_KILLS_AT_LEAST, KILLS_PER_APP)
    lines = list(word_count_lines(WORD_COUNT_LINES, seed=seed))
    app = AppUnderTest.create(
        "word_count_sqlite",
        bootstrap,
        tmp_path,
        suffix,
        {"input_topic": topic, "output_topic": out},
        max_records_per_batch=WORD_COUNT_BATCH,
        commit_interval_ms=2_000,
        snapshot_interval_s=1.0,
    )
    feed = _feeder(bootstrap, topic, lines, kills)
    app.kill_at_random_moments(kills, random.Random(seed), before=feed)
    manifests = tmp_path / "snapshots" / app.app_id / "manifests"
    assert list((manifests / "1_2" / "word-counts").glob("*.json")), "1_2 was never snapshotted"
    assert app.remove_task_dir("1_2") and app.remove_task_dir("1_3")
    shutil.rmtree(manifests / "1_3")  # no snapshot left: the whole changelog
    status = app.run_to_completion(kills)
    print(f"word_count_sqlite kills: {json.dumps(app.kills)}")
    restores = {
        task: {r["store"]: r for r in status["tasks"][task]["restore"]}["word-counts"]
        for task in ("1_2", "1_3")
    }
    assert restores["1_2"]["source"] == "snapshot", restores
    assert restores["1_3"]["source"] == "full replay", restores

    expected = wc_ref.recompute(read_topic(bootstrap, topic))
    topology = app.spec.build_topology()
    assert topology.store_specs(1)[0].engine == "sqlite"
    counts = read_store(app.settings, topology, "word-counts", PARTITIONS)
    assert counts == expected.counts, f"kills: {json.dumps(app.kills)}"
    latest: dict[str, int] = {}
    for record in deduped(bootstrap, out):
        latest[record.key.decode()] = int(record.value)  # type: ignore[union-attr,arg-type]
    assert latest == expected.counts
    dlq = deduped(bootstrap, dlq_topic(app.app_id))
    assert sorted(sources_of(dlq)) == sorted(expected.dlq)


def test_patient_monitoring_is_exact_after_random_kill9s(broker, tmp_path) -> None:
    bootstrap = broker.bootstrap_servers
    seed = _seed()
    suffix = uuid.uuid4().hex[:6]
    topic = f"patient-events-{suffix}"
    alerts, heart_rate = f"patient-alerts-{suffix}", f"heart-rate-{suffix}"
    events = patient_events(patients=24, minutes=25, seed=seed, malformed_share=0.01)
    feed = _feeder(bootstrap, topic, events)
    app = AppUnderTest.create(
        "patient_monitoring",
        bootstrap,
        tmp_path,
        suffix,
        {"input_topic": topic, "alerts_topic": alerts, "heart_rate_topic": heart_rate},
        max_records_per_batch=4_000,
        commit_interval_ms=2_000,
    )
    app.kill_at_random_moments(
        KILLS_PER_APP,
        random.Random(seed),
        before=feed,
        between=_drop_a_task_dir(app, "0_1", KILLS_PER_APP // 2),
    )
    app.run_to_completion(KILLS_PER_APP)
    print(f"patient kills: {json.dumps(app.kills)}; task dir dropped after run {app.dropped_at}")
    assert app.dropped_at is not None, "the task directory was never deleted"

    expected = pm_ref.recompute(read_topic(bootstrap, topic))
    assert expected.alerts, "the generated data must produce alerts"
    topology = app.spec.build_topology()
    windows = read_store(app.settings, topology, "pulse-counts", PARTITIONS)
    assert windows == expected.pulse_windows, f"kills: {json.dumps(app.kills)}"
    table = read_store(app.settings, topology, "heart-rate", PARTITIONS)
    assert table == expected.heart_rate

    dlq = deduped(bootstrap, dlq_topic(app.app_id))
    assert sorted(sources_of(dlq)) == sorted(expected.dlq)

    got_alerts = [json.loads(r.value) for r in deduped(bootstrap, alerts)]  # type: ignore[arg-type]
    key = lambda a: json.dumps(a, sort_keys=True)  # noqa: E731
    assert sorted(got_alerts, key=key) == sorted(expected.alerts, key=key)

    outputs = [
        (r.key.decode(), json.loads(r.value) if r.value is not None else None)  # type: ignore[union-attr]
        for r in deduped(bootstrap, heart_rate)
    ]
    assert pm_ref.latest_heart_rate(outputs) == expected.heart_rate


# ~80 s: make test-chaos only. make test keeps SIGTERM covered through the real spark-submit
# (tests/spark/test_spark_submit_sigterm.py) and the supervisor's graceful stops.
@pytest.mark.chaos
@pytest.mark.parametrize("signal_name", ["SIGTERM"])
def test_sigterm_stops_gracefully_after_committing(broker, tmp_path, signal_name) -> None:
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    topic, out = f"lines-{suffix}", f"word-counts-{suffix}"
    produce(bootstrap, topic, word_count_lines(4_000, seed=3), partitions=PARTITIONS)
    app = AppUnderTest.create(
        "word_count",
        bootstrap,
        tmp_path,
        suffix,
        {"input_topic": topic, "output_topic": out},
        max_records_per_batch=2_000,
    )
    proc = app.process(0, stop_when_idle=False).start()
    proc.wait_for(lambda s: (s.get("last_batch") or {}).get("batch_id", -1) >= 1, 180)
    proc.terminate()
    assert proc.wait(120) == 0
    status = proc.status()
    assert status is not None and status["state"] == "NOT_RUNNING"
    # The status a supervisor reads: per-task lag, restores, store sizes, last batch.
    assert set(status["task_live"]) == {f"{s}_{p}" for s in (0, 1) for p in range(PARTITIONS)}
    assert all(t["source_lag"] is not None for t in status["task_live"].values())
    counted = [t for tid, t in status["tasks"].items() if tid.startswith("1_") and t]
    assert counted and all("word-counts" in t["store_entries_approx"] for t in counted)
    assert status["last_batch"]["records"] > 0 and status["throughput"]["batches"] >= 2
    app.run_to_completion(1)
    expected = wc_ref.recompute(read_topic(bootstrap, topic))
    assert read_store(app.settings, app.spec.build_topology(), "word-counts", PARTITIONS) == (
        expected.counts
    )
