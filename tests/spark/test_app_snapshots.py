"""Snapshots of a running app (POST /snapshot on its status endpoint) and its automatic
restore from the newest snapshot + the changelog tail when a task directory is lost:
word_count in this process on the tests' local[2] Spark session, the embedded broker,
file:// snapshot storage."""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from spark_apps.word_count.reference import recompute
from statekeeper import cli
from statekeeper.app.spec import load_app_spec
from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.app.store_reader import read_store
from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.admin import ensure_topic, make_admin
from statekeeper.kafka.embedded import EmbeddedBroker
from statekeeper.kafka.offsets import LogEndReader
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.settings import StatekeeperSettings
from statekeeper.snapshots import SnapshotStorage, list_snapshots
from statekeeper.testing.app_process import spark_app_spec

VOCABULARY = 400  # first run: ~200 distinct words per counting task
TAIL_WORDS = 10  # the tail after the snapshot touches at most these
TAIL_LINES = 100


def _status(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return json.load(resp)


def _wait(what: str, check: Any, timeout_s: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _caught_up(app: StatekeeperApp, ends_reader: LogEndReader) -> bool:
    """Every task committed up to the end of its input (lines and the repartition topic)."""
    committed: dict[str, int] = {}
    for task in app.board.snapshot()["tasks"].values():
        committed.update(task.get("committed_offsets") or {})
    tps = [(t, p) for t in ("lines", "snap-app-words-repartition") for p in (0, 1)]
    ends = ends_reader.read(tps)
    return all(committed.get(f"{t}:{p}", -1) >= end for (t, p), end in ends.items())


def _metrics_agree(url: str) -> bool:
    """Scrape ``/metrics`` between two reads of ``/status``; True when both reads agree and
    the scrape shows their records, batches, zero lag, commits and store operations."""
    from prometheus_client import CONTENT_TYPE_LATEST
    from prometheus_client.parser import text_string_to_metric_families

    before = _status(url)
    with urllib.request.urlopen(url.rsplit("/", 1)[0] + "/metrics", timeout=5) as resp:
        assert resp.headers["Content-Type"] == CONTENT_TYPE_LATEST
        text = resp.read().decode()
    after = _status(url)
    lag = [p["end"] - p["position"] for p in after["source_partitions"]]
    if before["totals"] != after["totals"] or any(lag):
        return False  # a batch or a lag refresh in between: scrape again
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return found[(name, tuple(sorted({"app": "snap-app", **labels}.items())))]

    assert value("statekeeper_up") == 1
    assert value("statekeeper_app_state", statekeeper_app_state="RUNNING") == 1
    records = value("statekeeper_records_processed_total")
    assert records == after["totals"]["records_processed"] >= 600 + TAIL_LINES
    assert value("statekeeper_batches_total") == after["throughput"]["batches"] > 0
    assert len(after["source_partitions"]) == 4  # lines and the repartition topic, 2 each
    for p in after["source_partitions"]:
        labels = {"task": p["task"], "topic": p["topic"], "partition": str(p["partition"])}
        assert value("statekeeper_source_lag_records", **labels) == 0
    for tid, task in after["tasks"].items():
        assert value("statekeeper_task_source_lag_records", task=tid) == 0
        commits = task["commits"]
        assert commits["count"] > 0 and commits["last_seconds"] > 0
        summary = "statekeeper_task_commit_duration_seconds"
        assert value(f"{summary}_count", task=tid) == commits["count"]
        assert value(f"{summary}_sum", task=tid) == pytest.approx(commits["seconds_sum"])
        last = value("statekeeper_task_last_commit_duration_seconds", task=tid)
        assert last == pytest.approx(commits["last_seconds"])
    for tid in ("1_0", "1_1"):  # the counting tasks: their store's puts and gets
        for op in ("get", "put"):
            labels = {"task": tid, "store": "word-counts", "operation": op}
            count = value("statekeeper_store_operation_duration_seconds_count", **labels)
            ops = after["tasks"][tid]["store_operations"]["word-counts"][op]
            assert count == ops["count"] > 0
        age = value("statekeeper_snapshot_age_seconds", task=tid)
        assert 0 <= age < 600
    return True


@pytest.fixture(params=["file", "s3"])
def snapshot_target(
    request: Any, spark: Any, tmp_path: Path, monkeypatch: Any
) -> Iterator[dict[str, Any]]:
    """Settings naming the snapshot storage (file:// next to the state dir, or a bucket on a
    moto S3 server) and the options to open it in the test. S3 credentials come from the
    environment: the test's, and the Spark Python workers' through the context's executor
    environment (they start with it, not with this process's)."""
    if request.param == "file":
        yield {"settings": {}, "url": (tmp_path / "snapshots").as_uri(), "options": {}}
        return
    moto = request.getfixturevalue("moto_s3")
    bucket = f"snaps-{tmp_path.name[-20:]}".lower().replace("_", "-")
    moto.make_bucket(bucket)
    creds = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for key, value in creds.items():
        monkeypatch.setenv(key, value)
    environment = spark.sparkContext.environment
    saved = dict(environment)
    environment.update(creds)
    url = f"s3://{bucket}/apps"
    try:
        yield {
            "settings": {"snapshot_url": url, "snapshot_s3_endpoint": moto.endpoint_url},
            "url": url,
            "options": {"s3_endpoint": moto.endpoint_url},
        }
    finally:
        environment.clear()
        environment.update(saved)


def test_snapshot_requested_on_the_endpoint_restores_a_lost_task_with_only_the_tail(
    spark: Any, tmp_path: Path, capsys: Any, snapshot_target: dict[str, Any]
) -> None:
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        ensure_topic(make_admin(bootstrap), "lines", 2)
        producer = Producer(producer_config(bootstrap))
        for i in range(600):
            line = " ".join(f"w{(i * 7 + j * 13) % VOCABULARY}" for j in range(3))
            producer.produce("lines", line.encode(), b"%d" % i, i % 2)
        assert producer.flush(15) == 0
        settings = StatekeeperSettings(
            bootstrap_servers=bootstrap,
            application_id="snap-app",
            state_dir=tmp_path / "state",
            checkpoint_dir=tmp_path / "checkpoints",
            # Every batch drains its source, so every batch commits (R3, docs/invariants.md) and the
            # committed offsets in the status say when the input is processed.
            max_records_per_batch=100_000,
            trigger_interval_ms=50,
            starting_offsets="earliest",
            status_port=0,
            **snapshot_target["settings"],
        )
        topology = load_app_spec(spark_app_spec("word_count")).build_topology()
        app = StatekeeperApp(topology, settings)
        ends = LogEndReader(consumer_config(bootstrap), 10.0)
        runner = threading.Thread(target=app.run, name="snap-app")
        runner.start()
        try:
            _wait(
                "the first run to catch up",
                lambda: app.state.value == "RUNNING" and _caught_up(app, ends),
            )
            url = app.status_url
            assert url is not None
            post = urllib.request.Request(url.rsplit("/", 1)[0] + "/snapshot", method="POST")
            with urllib.request.urlopen(post, timeout=5) as resp:
                assert resp.status == 202
                request_id = json.load(resp)["request_id"]
            request = _wait(
                "the snapshot to upload",
                lambda: (
                    (r := _status(url)["snapshot_requests"][request_id])["state"]
                    in ("uploaded", "failed")
                    and r
                ),
            )
            assert request["state"] == "uploaded", request
            assert sorted(request["tasks"]) == ["1_0", "1_1"]  # the counting tasks
            tasks = _status(url)["tasks"]
            snap = tasks["1_1"]["snapshot"]
            assert snap["request_id"] == request_id and snap["pause_ms"] >= 0
            snapshot_id = snap["snapshot_ids"]["word-counts"]

            # `statekeeper snapshot create` finds the app running and asks it the same way.
            spec = tmp_path / "snap-app.yaml"
            topology_file = Path(spark_app_spec("word_count")).parent / "topology.py"
            spec.write_text(
                f"application_id: snap-app\ntopology: {topology_file}:build_topology\n"
                f"settings: {{bootstrap_servers: '{bootstrap}', "
                f"state_dir: '{settings.state_dir}', "
                f"snapshot_url: '{snapshot_target['url']}'}}\n"
            )
            capsys.readouterr()
            assert cli.main(["snapshot", "create", "--app", str(spec), "--json"]) == 0
            created = json.loads(capsys.readouterr().out)
            assert created["running"] and created["state"] == "uploaded"
            assert created["request_id"] != request_id and created["batch_id"] is not None
            ids = {(r["task"], r["store"]): r["snapshot_id"] for r in created["snapshots"]}
            assert ids[("1_1", "word-counts")] != snapshot_id
            snapshot_id = ids[("1_1", "word-counts")]  # the newest: the restore's source

            # The tail: more records after the snapshot.
            for i in range(600, 600 + TAIL_LINES):
                producer.produce("lines", f"w{i % TAIL_WORDS}".encode(), b"%d" % i, i % 2)
            assert producer.flush(15) == 0
            _wait("the tail to be processed", lambda: _caught_up(app, ends))
            # /metrics says what /status says (once the lag refresh saw the caught-up input).
            _wait("/metrics to agree with /status", lambda: _metrics_agree(url))
        finally:
            ends.close()
            app.stop()
            runner.join(120)
        assert app.state.value == "NOT_RUNNING"

        storage = SnapshotStorage(
            snapshot_target["url"], "snap-app", create=False, **snapshot_target["options"]
        )
        [manifest] = [
            m for m in list_snapshots(storage, "1_1", "word-counts") if m.snapshot_id == snapshot_id
        ]
        assert manifest.key_count > TAIL_LINES  # a full replay would apply at least these

        # Reading the stores takes the task locks, so the Spark workers (they outlive the app
        # in this session) close the tasks they kept open.
        expected = recompute(read_topic(bootstrap, "lines"))
        assert read_store(settings, topology, "word-counts", 2) == expected.counts

        # Task 1_1 loses its directory; the restart installs the snapshot and replays the tail.
        shutil.rmtree(settings.state_dir / "snap-app" / "1_1")
        for i in range(700, 720):  # new input, so the tasks open (a restart opens on input)
            producer.produce("lines", f"w{i % TAIL_WORDS}".encode(), b"%d" % i, i % 2)
        assert producer.flush(15) == 0
        # The restart also snapshots on a schedule (every second while batches run).
        restarted = StatekeeperApp(topology, settings.model_copy(update={"snapshot_interval_s": 1}))
        restarted.run(stop_when_idle=True, idle_s=1.0)
        scheduled = restarted.board.snapshot()["snapshot_requests"]
        assert scheduled and all(r["source"] == "schedule" for r in scheduled.values())
        assert all(r["state"] == "uploaded" for r in scheduled.values()), scheduled
        tasks = restarted.board.snapshot()["tasks"]
        lost = {r["store"]: r for r in tasks["1_1"]["restore"]}["word-counts"]
        kept = {r["store"]: r for r in tasks["1_0"]["restore"]}["word-counts"]
        assert lost["source"] == "snapshot" and lost["snapshot_id"] == snapshot_id
        assert not lost["full"] and 0 < lost["records"] <= TAIL_LINES
        assert kept["source"] == "local state"
        expected = recompute(read_topic(bootstrap, "lines"))
        assert read_store(settings, topology, "word-counts", 2) == expected.counts
