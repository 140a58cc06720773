"""A restart past a damaged snapshot history: word_count on the tests' local[2] Spark session,
the embedded broker, file:// snapshots. Task 1_0's newest manifest is truncated and task 1_1
lost its directory; the restarted app restores 1_1 (saying from what), never enters ERROR,
and its counts equal the recomputation; ``snapshot list`` names the unreadable manifest."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from spark_apps.word_count.reference import recompute
from statekeeper import cli
from statekeeper.app.spec import load_app_spec
from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.app.store_reader import read_store
from statekeeper.kafka.adapter import producer_config
from statekeeper.kafka.admin import ensure_topic, make_admin
from statekeeper.kafka.embedded import EmbeddedBroker
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.settings import StatekeeperSettings
from statekeeper.snapshots import SnapshotStorage, list_snapshots
from statekeeper.testing.app_process import spark_app_spec

APP = "dmg-app"
VOCABULARY = 200


def _produce(producer: Producer, start: int, end: int) -> None:
    for i in range(start, end):
        line = " ".join(f"w{(i * 7 + j * 13) % VOCABULARY}" for j in range(3))
        producer.produce("lines", line.encode(), b"%d" % i, i % 2)
    assert producer.flush(15) == 0


def test_a_restart_past_a_truncated_manifest_and_a_lost_task(
    spark: Any, tmp_path: Path, capsys: Any
) -> None:
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        ensure_topic(make_admin(bootstrap), "lines", 2)
        producer = Producer(producer_config(bootstrap))
        _produce(producer, 0, 300)
        settings = StatekeeperSettings(
            bootstrap_servers=bootstrap,
            application_id=APP,
            state_dir=tmp_path / "state",
            checkpoint_dir=tmp_path / "checkpoints",
            max_records_per_batch=100_000,
            trigger_interval_ms=50,
            starting_offsets="earliest",
            status_port=None,
        )
        topology = load_app_spec(spark_app_spec("word_count")).build_topology()
        first = StatekeeperApp(topology, settings.model_copy(update={"snapshot_interval_s": 1}))
        first.run(stop_when_idle=True, idle_s=1.0)
        requests = first.board.snapshot()["snapshot_requests"]
        assert requests and all(r["state"] == "uploaded" for r in requests.values()), requests
        # Reading the stores takes the task locks: the Spark workers close the tasks they keep.
        assert (
            read_store(settings, topology, "word-counts", 2)
            == recompute(read_topic(bootstrap, "lines")).counts
        )

        storage = SnapshotStorage((tmp_path / "snapshots").as_uri(), APP, create=False)
        newest_a = list_snapshots(storage, "1_0", "word-counts")[-1]
        newest_b = list_snapshots(storage, "1_1", "word-counts")[-1]
        path_a = Path(storage.manifest_path("1_0", "word-counts", newest_a.snapshot_id))
        path_a.write_text(path_a.read_text()[:100])  # truncated
        shutil.rmtree(settings.state_dir / APP / "1_1")
        _produce(producer, 300, 340)  # new input, so the tasks open

        restarted = StatekeeperApp(topology, settings)
        states: list[str] = []
        restarted.add_state_listener(lambda new, _old: states.append(new.value))
        restarted.run(stop_when_idle=True, idle_s=1.0)
        assert "RUNNING" in states and "ERROR" not in states, states
        assert restarted.state.value == "NOT_RUNNING"
        status = restarted.board.snapshot()
        assert not status.get("error")
        lost = {r["store"]: r for r in status["tasks"]["1_1"]["restore"]}["word-counts"]
        kept = {r["store"]: r for r in status["tasks"]["1_0"]["restore"]}["word-counts"]
        assert lost["source"] == "snapshot" and lost["snapshot_id"] == newest_b.snapshot_id
        assert not lost["full"] and "snapshot_fallbacks" not in lost
        assert kept["source"] == "local state"
        expected = recompute(read_topic(bootstrap, "lines"))
        assert read_store(settings, topology, "word-counts", 2) == expected.counts

    capsys.readouterr()
    argv = ["snapshot", "list", "--app", APP, "--url", storage.url, "--json"]
    assert cli.main(argv) == 1
    [unreadable] = json.loads(capsys.readouterr().out)["unreadable"]
    assert unreadable["path"] == str(path_a) and unreadable["task"] == "1_0"
