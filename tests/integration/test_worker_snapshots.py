"""Snapshots taken inside the worker (run_share) at a commit, uploaded in the background
(by the worker, or by the executor's service process through the upload spool), and
installed when a task's directory is lost: real broker, real RocksDB, file:// storage."""

from __future__ import annotations

import shutil
import signal
import time
import uuid
from collections import Counter
from typing import Any

import pytest
from confluent_kafka import Producer

from statekeeper.app.store_reader import read_store
from statekeeper.app.topics import prepare_topics
from statekeeper.kafka.adapter import producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.model import OffsetRange
from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.settings import StatekeeperSettings
from statekeeper.snapshots import SnapshotStorage, list_snapshots, verify_snapshot
from statekeeper.worker import service_process
from statekeeper.worker.task_run import TaskRun, TaskRunResult
from statekeeper.worker.task_runner import (
    _services,
    close_worker_services,
    run_share,
    settings_to_json,
)

PARTITIONS = 2
PER_BATCH = 100  # records per partition and batch

#: Who uploads: each worker (a thread) or the executor's service process (``process``).
UPLOADERS = pytest.mark.parametrize("uploader", ["in_worker", "process"])


def _wait_uploads(settings_json: str) -> None:
    snapshots = _services(settings_json).snapshots
    if snapshots.spool is None:
        assert snapshots.uploader.wait_idle(30)
        return
    deadline = time.monotonic() + 60
    while snapshots.spool.pending:
        assert time.monotonic() < deadline, "the service process did not upload the spool"
        time.sleep(0.05)


def _close() -> None:
    """Close the worker's services, and stop the service process a run started."""
    close_worker_services()
    for process in service_process._started:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) in (0, -signal.SIGTERM)  # -: before its handler was set
    service_process._started.clear()
    service_process._last_start.clear()


def _topology(topic: str) -> Any:
    builder = StreamsBuilder()
    builder.stream(topic, key_serde="str", value_serde="str").group_by_key().count(
        Materialized.as_("counts")
    )
    return builder.build()


def _runs(topic: str, batch_id: int, request: str | None = None, read: bool = True) -> list:
    start, end = batch_id * PER_BATCH, (batch_id + 1) * PER_BATCH
    return [
        TaskRun(
            f"0_{p}",
            0,
            p,
            (OffsetRange(topic, p, start, end),) if read else (),
            batch_id,
            1_000 * batch_id,
            snapshot_request=request,
        )
        for p in range(PARTITIONS)
    ]


def _run(runs: list[TaskRun], topology: Any, settings_json: str) -> list[TaskRunResult]:
    out = run_share(0, [runs], uuid.uuid4().hex, topology, settings_json)
    return [r for r in out if isinstance(r, TaskRunResult)]  # not the services' report


def _events(results: list[TaskRunResult], kind: str) -> dict[str, dict]:
    return {e["task"]: e for r in results for e in r.snapshots if e["event"] == kind}


def _produce(broker: Any, topic: str, batches: int, expected: Counter) -> None:
    producer = Producer(producer_config(broker.bootstrap_servers))
    for i in range(batches * PER_BATCH * PARTITIONS):
        key = f"k{i % 60}"  # 30 keys per partition: k0, k2, ... in 0 and k1, k3, ... in 1
        producer.produce(topic, b"x", key.encode(), partition=i % PARTITIONS)
        expected[key] += 1
    assert producer.flush(15) == 0


@UPLOADERS
def test_snapshot_at_a_commit_uploads_in_background_and_restores_a_lost_task(
    broker, admin, topic_name, tmp_path, uploader
):
    ensure_topic(admin, topic_name, PARTITIONS)
    expected: Counter[str] = Counter()
    _produce(broker, topic_name, 4, expected)
    app = f"wsnap-{uuid.uuid4().hex[:8]}"
    settings = StatekeeperSettings(
        bootstrap_servers=broker.bootstrap_servers,
        application_id=app,
        state_dir=tmp_path / "state",
        commit_interval_ms=3_600_000,  # only the first batch and the snapshot force commits
        executor_services_process=uploader == "process",
    )
    topology = _topology(topic_name)
    prepare_topics(admin, topology, app, 30.0)
    settings_json = settings_to_json(settings)
    try:
        first = _run(_runs(topic_name, 0), topology, settings_json)
        assert all(r.committed and not r.snapshots for r in first)
        held = _run(_runs(topic_name, 1), topology, settings_json)
        assert not any(r.committed for r in held)  # the interval is not due
        assert not service_process._started  # nothing to upload: no service process yet

        # The snapshot request forces the commit of batch 2 and stages right after it.
        snap = _run(_runs(topic_name, 2, request="req-1"), topology, settings_json)
        assert all(r.committed and r.committed_batch_id == 2 for r in snap)
        staged = _events(snap, "staged")
        assert sorted(staged) == ["0_0", "0_1"]
        # The spooled uploads started the executor's service process.
        assert len(service_process._started) == (1 if uploader == "process" else 0)
        assert all(e["request_id"] == "req-1" and e["batch_id"] == 2 for e in staged.values())
        assert all(0 <= e["pause_ms"] <= e["stage_ms"] for e in staged.values())
        _wait_uploads(settings_json)

        # Upload events come back with the worker's next results (any task's).
        batch3 = _run(_runs(topic_name, 3), topology, settings_json)
        uploaded = _events(snap + batch3, "uploaded")  # a fast upload rides with `snap`
        assert sorted(uploaded) == ["0_0", "0_1"]
        assert all(e["bytes_uploaded"] > 0 and e["upload_seconds"] >= 0 for e in uploaded.values())
        storage = SnapshotStorage((tmp_path / "snapshots").as_uri(), app, create=False)
        manifests = {m.task: m for m in list_snapshots(storage, store="counts")}
        assert {t: m.snapshot_id for t, m in manifests.items()} == {
            t: e["snapshot_ids"]["counts"] for t, e in staged.items()
        }
        assert all(m.batch_id == 2 and verify_snapshot(storage, m).ok for m in manifests.values())

        # A commit-only run (no input) with a request stages the task at its last commit.
        idle = _run(_runs(topic_name, 3, request="req-2", read=False), topology, settings_json)
        assert all(r.committed for r in idle)
        assert {t: e["batch_id"] for t, e in _events(idle, "staged").items()} == {
            "0_0": 3,
            "0_1": 3,
        }
        _wait_uploads(settings_json)
    finally:
        _close()

    # Task 0_1 loses its directory: it comes back from its newest snapshot (batch 3, the
    # commit-only one) with no tail; then its state equals a recount.
    shutil.rmtree(settings.state_dir / app / "0_1")
    try:
        after = _run(_runs(topic_name, 3, read=False), topology, settings_json)
        restored = {r.task_id: {s["store"]: s for s in r.restored} for r in after}
        lost = restored["0_1"]["counts"]
        assert lost["source"] == "snapshot" and not lost["full"]
        newest = max(
            (m for m in list_snapshots(storage, "0_1", "counts")), key=lambda m: m.created_at
        )
        assert lost["snapshot_id"] == newest.snapshot_id and lost["records"] == 0
        assert restored["0_0"]["counts"]["source"] == "local state"
    finally:
        _close()
    assert read_store(settings, topology, "counts", PARTITIONS) == dict(expected)


def test_snapshot_tail_is_replayed_after_the_snapshot(broker, admin, topic_name, tmp_path):
    ensure_topic(admin, topic_name, PARTITIONS)
    expected: Counter[str] = Counter()
    _produce(broker, topic_name, 3, expected)
    app = f"wtail-{uuid.uuid4().hex[:8]}"
    settings = StatekeeperSettings(
        bootstrap_servers=broker.bootstrap_servers,
        application_id=app,
        state_dir=tmp_path / "state",
        commit_interval_ms=0,
    )
    topology = _topology(topic_name)
    prepare_topics(admin, topology, app, 30.0)
    settings_json = settings_to_json(settings)
    try:
        _run(_runs(topic_name, 0, request="r"), topology, settings_json)
        _wait_uploads(settings_json)  # by the service process (the default)
        tail = _run(_runs(topic_name, 1), topology, settings_json)
        tail += _run(_runs(topic_name, 2), topology, settings_json)
    finally:
        _close()
    shutil.rmtree(settings.state_dir / app / "0_0")
    try:
        [reopened] = _run(_runs(topic_name, 2, read=False)[:1], topology, settings_json)
    finally:
        _close()
    report = next(r for r in reopened.restored if r["store"] == "counts")
    assert report["source"] == "snapshot" and not report["full"]
    # Only the tail after the snapshot's marker: the keys batches 1 and 2 changed in
    # partition 0 (one absolute value per key and batch, the record cache folds the rest).
    assert 0 < report["records"] <= 2 * 30
    progress = (settings.state_dir / app / "0_0" / ".restore-progress.json").read_text()
    assert '"source": "snapshot"' in progress and report["snapshot_id"] in progress
    assert read_store(settings, topology, "counts", PARTITIONS) == dict(expected)


@UPLOADERS
def test_an_upload_failure_is_reported_and_processing_goes_on(
    broker, admin, topic_name, tmp_path, uploader
):
    ensure_topic(admin, topic_name, PARTITIONS)
    expected: Counter[str] = Counter()
    _produce(broker, topic_name, 2, expected)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the snapshot root should be")
    app = f"wfail-{uuid.uuid4().hex[:8]}"
    settings = StatekeeperSettings(
        bootstrap_servers=broker.bootstrap_servers,
        application_id=app,
        state_dir=tmp_path / "state",
        snapshot_url=(blocker / "snaps").as_uri(),
        restore_from_snapshots=False,
        commit_interval_ms=0,
        executor_services_process=uploader == "process",
    )
    topology = _topology(topic_name)
    prepare_topics(admin, topology, app, 30.0)
    settings_json = settings_to_json(settings)
    try:
        first = _run(_runs(topic_name, 0, request="doomed"), topology, settings_json)
        assert all(r.committed for r in first)
        assert sorted(_events(first, "staged")) == ["0_0", "0_1"]
        _wait_uploads(settings_json)
        second = _run(_runs(topic_name, 1), topology, settings_json)
        failed = _events(first + second, "failed")  # a fast failure rides with `first`
        assert sorted(failed) == ["0_0", "0_1"]
        assert all(
            e["phase"] == "upload" and "not-a-directory" in e["error"] for e in failed.values()
        )
        assert all(r.committed and r.records_processed > 0 for r in second)
        staging = settings.state_dir / ".snapshot-staging"
        assert not any(p.is_file() for p in staging.rglob("*"))  # staged copies removed
        spool = settings.state_dir / app / ".executor" / "upload-spool"
        assert not any(p.is_file() for p in (spool / "jobs").rglob("*"))
    finally:
        _close()
    assert read_store(settings, topology, "counts", PARTITIONS) == dict(expected)
