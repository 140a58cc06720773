"""Damaged snapshot histories (real broker, RocksDB; file:// and a moto S3 server).

* A truncated manifest of one task never stops another task's automatic restore (the
  worker's open path), and a task whose own newest manifest is unreadable falls back to the
  previous snapshot, then to a full replay, saying why; a failing storage means a full
  replay, not a failed open; an open's error is never masked by the cleanup after it.
* A shared file lost from the storage is uploaded again by the next snapshot of a store that
  still has it (every older snapshot verifies again), without re-uploading the rest.
* ``statekeeper snapshot list|verify`` report unreadable manifests (exit code 1 only for what
  was asked about), ``verify --repair`` uploads what local copies have and names the rest,
  and ``restore`` goes on past the damage.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statekeeper.app.store_reader import read_store
from statekeeper.app.topics import prepare_topics
from statekeeper.cli import main
from statekeeper.kafka.admin import ensure_topic
from statekeeper.settings import StatekeeperSettings
from statekeeper.snapshots import (
    SnapshotStorage,
    list_snapshots,
    read_catalog,
    verify_snapshot,
)
from statekeeper.worker.task_runner import _services, close_worker_services, settings_to_json

from .spec_apps import spec_app_with_state
from .test_restore_from_snapshot import _store_contents
from .test_snapshot_cli import _json
from .test_worker_snapshots import PARTITIONS, _events, _produce, _run, _runs, _topology


@pytest.fixture(params=["file", "s3"])
def target(request: Any, tmp_path: Path, monkeypatch: Any) -> dict[str, Any]:
    """Where snapshots go: ``settings`` (for the app) and ``open()`` (the test's storage)."""
    if request.param == "file":
        url = (tmp_path / "snapshots").as_uri()
        return {"kind": "file", "settings": {"snapshot_url": url}, "options": {}, "url": url}
    moto = request.getfixturevalue("moto_s3")
    bucket = f"dmg-{uuid.uuid4().hex[:12]}"
    moto.make_bucket(bucket)
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(key, value)
    url = f"s3://{bucket}/apps"
    return {
        "kind": "s3",
        "settings": {"snapshot_url": url, "snapshot_s3_endpoint": moto.endpoint_url},
        "options": {"s3_endpoint": moto.endpoint_url},
        "url": url,
    }


def _storage(target: dict[str, Any], app: str) -> SnapshotStorage:
    return SnapshotStorage(target["url"], app, create=False, **target["options"])


def _truncate(storage: SnapshotStorage, task: str, store: str, snapshot_id: str) -> str:
    path = storage.manifest_path(task, store, snapshot_id)
    text = storage.fs.cat_file(path)
    storage.fs.pipe_file(path, text[: len(text) // 2])
    return path


def _worker_app(broker, admin, topic: str, tmp_path: Path, **settings: Any) -> tuple:
    ensure_topic(admin, topic, PARTITIONS)
    app = f"wdmg-{uuid.uuid4().hex[:8]}"
    config = StatekeeperSettings(
        bootstrap_servers=broker.bootstrap_servers,
        application_id=app,
        state_dir=tmp_path / "state",
        commit_interval_ms=0,
        # each worker uploads its snapshots: run_share runs here without a driver
        executor_services_process=False,
        **settings,
    )
    topology = _topology(topic)
    prepare_topics(admin, topology, app, 30.0)
    return config, topology, settings_to_json(config)


def _reopen(topic: str, topology: Any, settings_json: str) -> dict[str, dict[str, Any]]:
    """Open every task as the app's next batch would (a commit-only run): per task, how its
    ``counts`` store got its state."""
    try:
        after = _run(_runs(topic, 2, read=False), topology, settings_json)
    finally:
        close_worker_services()
    return {r.task_id: {s["store"]: s for s in r.restored}["counts"] for r in after}


def test_unreadable_manifests_never_stop_the_automatic_restore(
    broker, admin, topic_name, tmp_path, capsys
):
    expected: Counter[str] = Counter()
    settings, topology, settings_json = _worker_app(broker, admin, topic_name, tmp_path)
    _produce(broker, topic_name, 2, expected)
    app, state = settings.application_id, settings.state_dir
    try:
        for batch in (0, 1):  # two snapshots of each task
            _run(_runs(topic_name, batch, request=f"r{batch}"), topology, settings_json)
            assert _services(settings_json).snapshots.uploader.wait_idle(30)
    finally:
        close_worker_services()
    storage = SnapshotStorage((tmp_path / "snapshots").as_uri(), app, create=False)
    older_a, newest_a = list_snapshots(storage, "0_0", "counts")
    newest_b = list_snapshots(storage, "0_1", "counts")[-1]

    # Task A's newest manifest is truncated; task B lost its directory.
    truncated = _truncate(storage, "0_0", "counts", newest_a.snapshot_id)
    shutil.rmtree(state / app / "0_1")
    restored = _reopen(topic_name, topology, settings_json)
    assert restored["0_1"]["source"] == "snapshot"
    assert restored["0_1"]["snapshot_id"] == newest_b.snapshot_id
    assert "snapshot_fallbacks" not in restored["0_1"]  # A's damage is not B's business
    assert restored["0_0"]["source"] == "local state"
    assert read_store(settings, topology, "counts", PARTITIONS) == dict(expected)
    argv = ["--app", app, "--url", storage.url, "--json"]
    assert main(["snapshot", "list", *argv]) == 1
    listed = _json(capsys)
    assert len(listed["snapshots"]) == len(list_snapshots(storage))
    [unreadable] = listed["unreadable"]
    assert unreadable["path"] == truncated and unreadable["kind"] == "invalid"
    assert unreadable["task"] == "0_0" and unreadable["snapshot_id"] == newest_a.snapshot_id
    assert main(["snapshot", "list", *argv, "--task", "0_1"]) == 0
    only_b = _json(capsys)
    assert only_b["unreadable"] == [] and {s["task"] for s in only_b["snapshots"]} == {"0_1"}

    # Task A loses its directory too: its newest manifest is skipped for the one before.
    shutil.rmtree(state / app / "0_0")
    restored = _reopen(topic_name, topology, settings_json)
    lost = restored["0_0"]
    assert lost["source"] == "snapshot" and lost["snapshot_id"] == older_a.snapshot_id
    [fallback] = lost["snapshot_fallbacks"]
    assert fallback["snapshot_id"] == newest_a.snapshot_id
    assert fallback["reason"].startswith("unreadable manifest (invalid)")
    progress = json.loads((state / app / "0_0" / ".restore-progress.json").read_text())
    assert progress["stores"]["counts"]["snapshot_fallbacks"] == [fallback]
    assert read_store(settings, topology, "counts", PARTITIONS) == dict(expected)

    # Every manifest of A unreadable: a full replay, saying why.
    _truncate(storage, "0_0", "counts", older_a.snapshot_id)
    shutil.rmtree(state / app / "0_0")
    lost = _reopen(topic_name, topology, settings_json)["0_0"]
    assert lost["source"] == "full replay" and lost["full"]
    assert len(lost["snapshot_fallbacks"]) == 2
    assert lost["snapshot_note"] == "no snapshot verified; full changelog replay"
    assert read_store(settings, topology, "counts", PARTITIONS) == dict(expected)


def test_a_failing_storage_means_a_full_replay_not_a_failed_open(
    broker, admin, topic_name, tmp_path
):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the snapshot root should be")
    expected: Counter[str] = Counter()
    settings, topology, settings_json = _worker_app(
        broker,
        admin,
        topic_name,
        tmp_path,
        snapshot_url=(blocker / "snaps").as_uri(),
        restore_from_snapshots=True,
    )
    _produce(broker, topic_name, 2, expected)
    try:
        _run(_runs(topic_name, 0), topology, settings_json)
        _run(_runs(topic_name, 1), topology, settings_json)
    finally:
        close_worker_services()
    shutil.rmtree(settings.state_dir / settings.application_id / "0_1")
    lost = _reopen(topic_name, topology, settings_json)["0_1"]
    assert lost["source"] == "full replay" and lost["full"]
    assert lost["snapshot_note"].startswith("snapshot storage failed (SnapshotError")
    assert "not-a-directory" in lost["snapshot_note"]
    assert read_store(settings, topology, "counts", PARTITIONS) == dict(expected)


def test_an_open_error_is_not_masked_by_the_cleanup(broker, admin, topic_name, tmp_path):
    settings, topology, settings_json = _worker_app(broker, admin, topic_name, tmp_path)

    def fail(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("the task cannot open")

    try:
        _services(settings_json).env.task = fail
        # A commit-only run reads nothing, so it has no fetch to close.
        with pytest.raises(RuntimeError, match="the task cannot open"):
            _run(_runs(topic_name, 0, read=False), topology, settings_json)
        with pytest.raises(RuntimeError, match="the task cannot open"):
            _run(_runs(topic_name, 0), topology, settings_json)
    finally:
        close_worker_services()


def test_the_next_snapshot_heals_a_lost_shared_file(broker, admin, topic_name, tmp_path, target):
    expected: Counter[str] = Counter()
    settings, topology, settings_json = _worker_app(
        broker, admin, topic_name, tmp_path, **target["settings"]
    )
    _produce(broker, topic_name, 2, expected)
    try:
        _run(_runs(topic_name, 0, request="first"), topology, settings_json)
        assert _services(settings_json).snapshots.uploader.wait_idle(60)
        storage = _storage(target, settings.application_id)
        first = list_snapshots(storage)
        assert first and all(verify_snapshot(storage, m).ok for m in first)
        # The non-empty file most snapshots share (e.g. RocksDB's OPTIONS) is lost.
        uses = Counter(f.sha256 for m in first for f in m.files if f.stored)
        lost, count = uses.most_common(1)[0]
        assert count >= 2 and {m.task for m in first if lost in _shas(m)} == {"0_0", "0_1"}
        storage.fs.rm(storage.shared_path(lost))
        assert [verify_snapshot(storage, m).ok for m in first] == [
            lost not in _shas(m) for m in first
        ]

        # The next snapshot cycle checks what it references and uploads the lost file again.
        second = _run(_runs(topic_name, 1, request="second"), topology, settings_json)
        assert _services(settings_json).snapshots.uploader.wait_idle(60)
        more = _run(_runs(topic_name, 1, read=False), topology, settings_json)
        uploaded = _events(second + more, "uploaded")
        assert sorted(uploaded) == ["0_0", "0_1"]
        assert sum(e["files_healed"] for e in uploaded.values()) == 1  # once, not per task
        for event in uploaded.values():
            assert event["bytes_uploaded"] < event["bytes_total"]  # not a full re-upload
    finally:
        close_worker_services()
    everything = list_snapshots(storage)
    assert len(everything) == 2 * len(first)
    assert all(verify_snapshot(storage, m).ok for m in everything)  # the old ones too
    assert read_store(settings, topology, "counts", PARTITIONS) == dict(expected)


def _shas(manifest: Any) -> set[str]:
    return {f.sha256 for f in manifest.files}


def test_snapshot_cli_on_a_damaged_history(admin, broker, tmp_path, target, capsys):
    extra = "".join(f", {k}: '{v}'" for k, v in target["settings"].items())
    spec, app_id = spec_app_with_state(
        admin, broker, tmp_path, prefix="dmgcli", entries=50, batch_id=3, extra_settings=extra
    )
    argv = ["--app", str(spec), "--json"]
    assert main(["snapshot", "create", *argv]) == 0
    _json(capsys)
    state = tmp_path / "state"
    live = {t: _store_contents(state, app_id, t) for t in ("0_0", "0_1")}
    storage = _storage(target, app_id)

    def sst(task: str) -> Any:
        [m] = list_snapshots(storage, task, "totals")
        return m, max((f for f in m.files if f.name.endswith(".sst")), key=lambda f: f.size)

    # Damage: 0_0's SST is lost from the storage (the live store still has it); 0_1's SST
    # too, with 0_1's local directory (no copy anywhere); 0_1's windows manifest truncated.
    (m0, sst0), (m1, sst1) = sst("0_0"), sst("0_1")
    storage.fs.rm(storage.shared_path(sst0.sha256))
    storage.fs.rm(storage.shared_path(sst1.sha256))
    saved_0_1 = tmp_path / "saved-0_1"
    shutil.move(state / app_id / "0_1", saved_0_1)
    [windows] = list_snapshots(storage, "0_1", "windows")
    truncated = _truncate(storage, "0_1", "windows", windows.snapshot_id)

    assert main(["snapshot", "list", *argv]) == 1
    listed = _json(capsys)
    assert len(listed["snapshots"]) == 5
    assert [u["path"] for u in listed["unreadable"]] == [truncated]
    assert main(["snapshot", "list", *argv, "--task", "0_0"]) == 0
    assert _json(capsys)["unreadable"] == []

    assert main(["snapshot", "verify", *argv]) == 1
    verified = _json(capsys)
    bad = {s["snapshot_id"]: [b["name"] for b in s["bad"]] for s in verified["snapshots"]}
    assert bad[m0.snapshot_id] == [sst0.name] and bad[m1.snapshot_id] == [sst1.name]
    assert verified["unreadable"][0]["snapshot_id"] == windows.snapshot_id
    assert verified["repair"] is None

    assert main(["snapshot", "verify", *argv, "--repair"]) == 1
    repaired = _json(capsys)
    [done] = repaired["repair"]["repaired"]
    assert done["sha256"] == sst0.sha256
    assert done["source"].startswith(str(state / app_id / "0_0"))
    [missing] = repaired["repair"]["unrepairable"]
    assert missing["sha256"] == sst1.sha256 and missing["snapshots"] == [m1.snapshot_id]
    assert missing["reason"] == "no local copy with this SHA-256 and size"
    assert main(["snapshot", "verify", *argv, "--task", "0_0"]) == 0
    assert _json(capsys)["ok"] is True

    # A copy found elsewhere (--local) repairs the rest of what verify can see.
    assert main(["snapshot", "verify", *argv, "--repair", "--local", str(saved_0_1)]) == 1
    again = _json(capsys)  # still 1: the truncated manifest cannot be repaired from files
    assert [f["sha256"] for f in again["repair"]["repaired"]] == [sst1.sha256]
    assert all(s["ok"] for s in again["snapshots"])

    # A restore goes on past the damage: 0_1's windows store falls back to a full replay.
    assert main(["restore", *argv]) == 0
    stores = {(s["task"], s["store"]): s for s in _json(capsys)["stores"]}
    assert stores[("0_1", "totals")]["source"] == "snapshot"
    window = stores[("0_1", "windows")]
    assert window["source"] == "full replay"
    assert window["fallbacks"][0]["reason"].startswith("unreadable manifest (invalid)")
    assert {t: _store_contents(state, app_id, t) for t in ("0_0", "0_1")} == live


def test_an_empty_catalog_is_an_empty_list(tmp_path, capsys) -> None:
    url = (tmp_path / "snaps").as_uri()
    SnapshotStorage(url, "quiet-app")  # the app's folder, no snapshot finished yet
    for action in ("list", "verify"):
        assert main(["snapshot", action, "--app", "quiet-app", "--url", url, "--json"]) == 0
        payload = _json(capsys)
        assert payload["snapshots"] == [] and payload["unreadable"] == []
    assert read_catalog(SnapshotStorage(url, "quiet-app", create=False)).manifests == []
