"""StatekeeperApp run in this process on the tests' Spark session (a caller-owned session)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from spark_apps.word_count.reference import recompute
from statekeeper.app.spec import load_app_spec
from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.app.store_reader import read_store
from statekeeper.kafka.adapter import producer_config
from statekeeper.kafka.admin import ensure_topic, make_admin
from statekeeper.kafka.embedded import EmbeddedBroker
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.settings import StatekeeperSettings
from statekeeper.testing.app_process import spark_app_spec

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"]


def test_app_runs_in_a_caller_session_and_reports_spark_progress(
    spark: Any, tmp_path: Path
) -> None:
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        ensure_topic(make_admin(bootstrap), "lines", 2)
        producer = Producer(producer_config(bootstrap))
        for i in range(600):
            line = " ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 1 + i % 5))
            producer.produce("lines", line.encode(), b"%d" % i, i % 2)
        assert producer.flush(15) == 0
        settings = StatekeeperSettings(
            bootstrap_servers=bootstrap,
            application_id="in-session",
            state_dir=tmp_path / "state",
            checkpoint_dir=tmp_path / "checkpoints",
            max_records_per_batch=200,
            trigger_interval_ms=50,
            starting_offsets="earliest",
            status_port=None,
        )
        # Through the shipped spec: its topology file reaches the executors by value.
        topology = load_app_spec(spark_app_spec("word_count")).build_topology()
        app = StatekeeperApp(topology, settings)
        assert app.recent_progress == []
        app.run(stop_when_idle=True, idle_s=1.0)

        expected = recompute(read_topic(bootstrap, "lines"))
        assert read_store(settings, topology, "word-counts", 2) == expected.counts

        # A restart after task 1_1 (the counts of partition 1) lost its state directory: the
        # status says how each task got its state back (1_1 fully from its changelog, 1_0
        # from its local state).
        shutil.rmtree(settings.state_dir / "in-session" / "1_1")
        for i in range(600, 700):
            producer.produce("lines", WORDS[i % len(WORDS)].encode(), b"%d" % i, i % 2)
        assert producer.flush(15) == 0
        restarted = StatekeeperApp(topology, settings)
        restarted.run(stop_when_idle=True, idle_s=1.0)
        tasks = restarted.board.snapshot()["tasks"]
        lost = {r["store"]: r for r in tasks["1_1"]["restore"]}
        kept = {r["store"]: r for r in tasks["1_0"]["restore"]}
        assert lost["word-counts"]["full"] and lost["word-counts"]["reason"] == "no local state"
        assert lost["word-counts"]["records"] > 0
        assert not kept["word-counts"]["full"]
        expected = recompute(read_topic(bootstrap, "lines"))
        assert read_store(settings, topology, "word-counts", 2) == expected.counts

        # A restart with no new input runs no micro-batch; caught up, it is RUNNING (not
        # REBALANCING until input comes).
        idle = StatekeeperApp(topology, settings)
        seen: list[tuple[str, str]] = []
        idle.add_state_listener(lambda new, old: seen.append((old.name, new.name)))
        idle.run(stop_when_idle=True, idle_s=1.0)
        assert idle.batches == []
        assert ("REBALANCING", "RUNNING") in seen, seen

    # Spark's per-batch numbers, read from the query after it stopped: every batch the app
    # ran is there, and the last one ends where the input topic ends.
    progress = {p.batchId: p for p in app.recent_progress}
    ran = [b["batch_id"] for b in app.batches]
    assert ran and set(ran) <= set(progress)
    assert all(progress[b].durationMs["triggerExecution"] > 0 for b in ran)
    end = json.loads(progress[max(ran)].sources[0].endOffset)
    assert end["lines"] == {"0": 300, "1": 300}
