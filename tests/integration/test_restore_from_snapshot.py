"""Restore from snapshot + changelog tail (embedded broker, RocksDB, file:// storage)."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from statekeeper.cli import main
from statekeeper.errors import TaskLockedError
from statekeeper.ops.restore import restore_task
from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotError, SnapshotStorage, snapshot_task
from statekeeper.state.directory import TaskDirectory, TaskLock

from .test_snapshot_cli import _app_with_state
from .test_snapshots import SPECS, _by_store, _env, _fill

KEYS = 2_000
TAIL_KEYS = 50


def _live_state(env) -> dict[str, dict]:
    with env.task("0_0", 0, SPECS) as task:
        return {name: dict(task.store(name).all()) for name in ("kv", "mem")}


def _reports(reports):
    return {r.store: r for r in reports}


def test_restore_latest_fallback_and_full_replay(broker, tmp_path, topic_name):
    env = _env(broker, tmp_path, topic_name)
    storage = SnapshotStorage((tmp_path / "snaps").as_uri(), topic_name)
    rng = random.Random(7)
    task_dir = TaskDirectory(tmp_path / "state", topic_name, "0_0").path
    try:
        with env.task("0_0", 0, SPECS) as task:
            _fill(task, rng, list(range(KEYS)), batch=0)
            older = _by_store(snapshot_task(task, storage, tmp_path / "staging"))["kv"]
            _fill(task, rng, list(range(KEYS)), batch=1)
            newer = _by_store(snapshot_task(task, storage, tmp_path / "staging"))["kv"]
            # The tail: committed after the newest snapshot.
            _fill(task, rng, rng.sample(range(KEYS), TAIL_KEYS), batch=2)
            _fill(task, rng, rng.sample(range(KEYS), TAIL_KEYS), batch=3)
        live = _live_state(env)
        assert len(live["kv"]) == KEYS

        shutil.rmtree(task_dir)
        kv = _reports(restore_task(env, storage, "0_0", SPECS))
        assert kv["kv"].source == "snapshot"
        assert kv["kv"].snapshot_id == newer.manifest.snapshot_id
        assert kv["kv"].records_replayed == 2 * TAIL_KEYS  # the tail, not the changelog
        assert kv["kv"].bytes_downloaded == newer.manifest.total_bytes
        assert kv["kv"].batch_id == 3 and not kv["kv"].fallbacks
        assert kv["mem"].source == "changelog (in-memory store)"
        assert kv["mem"].records_replayed == 2 * KEYS + 2 * TAIL_KEYS
        assert _live_state(env) == live

        # Damage a file only the newest snapshot has: restore falls back and says why.
        shared_older = {f.sha256 for f in older.manifest.files}
        only_new = next(f for f in newer.manifest.files if f.sha256 not in shared_older)
        target = Path(storage.shared_path(only_new.sha256))
        target.write_bytes(b"x" + target.read_bytes()[1:])
        shutil.rmtree(task_dir)
        [report] = restore_task(env, storage, "0_0", SPECS, stores=["kv"])
        assert report.source == "snapshot"
        assert report.snapshot_id == older.manifest.snapshot_id
        [fallback] = report.fallbacks
        assert fallback["snapshot_id"] == newer.manifest.snapshot_id
        assert only_new.name in fallback["reason"] and "verification" in fallback["reason"]
        assert report.records_replayed == KEYS + 2 * TAIL_KEYS
        assert _live_state(env) == live

        # No snapshot: a full changelog replay gives the same state.
        [full] = restore_task(env, storage, "0_0", SPECS, stores=["kv"], from_snapshot="none")
        assert full.source == "full replay" and full.snapshot_id is None
        assert full.records_replayed == 2 * KEYS + 2 * TAIL_KEYS
        assert _live_state(env) == live

        # A running app holds the task lock: refused, naming the holder.
        lock = TaskLock(TaskDirectory(tmp_path / "state", topic_name, "0_0"), 1)
        with lock, pytest.raises(TaskLockedError, match="locked by PID"):
            restore_task(env, storage, "0_0", SPECS)
    finally:
        env.close()


def test_restore_cli_json(admin, broker, tmp_path, capsys):
    spec, app_id = _app_with_state(admin, broker, tmp_path)
    assert main(["snapshot", "create", "--app", str(spec), "--json"]) == 0
    capsys.readouterr()
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        state_dir=tmp_path / "state",
        application_id=app_id,
    )
    shutil.rmtree(Path(settings.state_dir) / app_id)

    assert main(["restore", "--app", str(spec), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    stores = {(s["task"], s["store"]): s for s in payload["stores"]}
    assert {t for t, _ in stores} == {"0_0", "0_1"}
    for task in ("0_0", "0_1"):
        totals = stores[(task, "totals")]
        assert totals["source"] == "snapshot" and totals["snapshot_id"]
        assert totals["records_replayed"] == 0  # nothing committed after the snapshot
        assert totals["bytes_downloaded"] > 0 and totals["batch_id"] == 3
    assert payload["bytes_downloaded"] > 0
    # The window store and the internal task-state store come back from snapshots too.
    assert {s["source"] for s in payload["stores"]} == {"snapshot"}, payload

    argv = ["restore", "--app", str(spec), "--task", "0_1", "--from-snapshot", "none"]
    assert main([*argv, "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    totals = next(s for s in full["stores"] if s["store"] == "totals")
    assert totals["source"] == "full replay" and totals["records_replayed"] == 50

    task_dir = TaskDirectory(Path(settings.state_dir), app_id, "0_0")
    with TaskLock(task_dir, 1):
        assert main(["restore", "--app", str(spec)]) == 2
    assert "locked by PID" in capsys.readouterr().err
    assert main(["restore", "--app", str(spec), "--from-snapshot", "no-such-id"]) == 2
    assert "no snapshot 'no-such-id'" in capsys.readouterr().err
    assert main(["restore", "--app", str(spec), "--store", "nope", "--from-snapshot", "none"]) == 2
    assert "--store nope: no such store" in capsys.readouterr().err


def _store_contents(state_dir: Path, app_id: str, task: str) -> dict[str, dict]:
    from rocksdict import AccessType, Rdict

    out = {}
    for store in sorted((state_dir / app_id / task / "rocksdb").iterdir()):
        if store.is_dir():
            db = Rdict(str(store), access_type=AccessType.read_only())
            try:
                out[store.name] = dict(db.items())
            finally:
                db.close()
    return out


def test_restore_to_a_directory_while_the_app_holds_its_tasks(admin, broker, tmp_path, capsys):
    spec, app_id = _app_with_state(admin, broker, tmp_path)
    assert main(["snapshot", "create", "--app", str(spec), "--json"]) == 0
    capsys.readouterr()
    live_root = tmp_path / "state"
    live = {t: _store_contents(live_root, app_id, t) for t in ("0_0", "0_1")}
    copy_root = tmp_path / "copy"
    # The "running app" holds both task locks: an in-place restore is refused, a copy is not.
    locks = [TaskLock(TaskDirectory(live_root, app_id, t), 1) for t in ("0_0", "0_1")]
    for lock in locks:
        lock.acquire()
    try:
        assert main(["restore", "--app", str(spec), "--to", str(copy_root), "--json"]) == 0
        payload = json.loads(capsys.readouterr().out)
    finally:
        for lock in locks:
            lock.release()
    assert payload["state_dir"] == str(copy_root)
    assert {s["source"] for s in payload["stores"]} == {"snapshot"}
    for task in ("0_0", "0_1"):
        assert _store_contents(copy_root, app_id, task) == live[task]
        assert _store_contents(live_root, app_id, task) == live[task]
    assert main(["restore", "--app", str(spec), "--to", str(live_root)]) == 2
    assert "the app's own state root" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("field", "value", "kind", "error"),
    [
        ("app", "other-app", "foreign-app", "belongs to app 'other-app'"),
        ("format_version", 99, "newer-format", "newer"),
    ],
)
def test_restore_skips_foreign_or_newer_manifests_saying_why(
    broker, tmp_path, topic_name, field, value, kind, error
):
    env = _env(broker, tmp_path, topic_name)
    storage = SnapshotStorage((tmp_path / "snaps").as_uri(), topic_name)
    try:
        with env.task("0_0", 0, SPECS) as task:
            _fill(task, random.Random(3), list(range(100)), batch=0)
            manifest = _by_store(snapshot_task(task, storage, tmp_path / "staging"))["kv"].manifest
        live = _live_state(env)
        path = Path(storage.manifest_path("0_0", "kv", manifest.snapshot_id))
        raw = json.loads(path.read_text())
        raw[field] = value
        path.write_text(json.dumps(raw))
        # Never installed; with no other snapshot the store is replayed in full.
        [report] = restore_task(env, storage, "0_0", SPECS, stores=["kv"])
        assert report.source == "full replay" and report.snapshot_id is None
        [fallback] = report.fallbacks
        assert fallback["snapshot_id"] == manifest.snapshot_id
        assert fallback["reason"].startswith(f"unreadable manifest ({kind})")
        assert error in fallback["reason"]
        assert _live_state(env) == live
        # Named explicitly, it is refused before anything is touched.
        with pytest.raises(SnapshotError, match=error):
            restore_task(env, storage, "0_0", SPECS, from_snapshot=manifest.snapshot_id)
    finally:
        env.close()


def test_restore_from_s3(broker, tmp_path, topic_name, moto_s3):
    env = _env(broker, tmp_path, topic_name)
    moto_s3.make_bucket("restore")
    storage = SnapshotStorage("s3://restore/apps", topic_name, **moto_s3.options)
    rng = random.Random(11)
    try:
        with env.task("0_0", 0, SPECS) as task:
            _fill(task, rng, list(range(500)), batch=0)
            snapshot_task(task, storage, tmp_path / "staging")
            _fill(task, rng, rng.sample(range(500), TAIL_KEYS), batch=1)
        live = _live_state(env)
        shutil.rmtree(TaskDirectory(tmp_path / "state", topic_name, "0_0").path)
        # A leftover of a restore that died mid-download is cleaned up.
        leftover = TaskDirectory(tmp_path / "state", topic_name, "0_0").store_path("kv")
        leftover = leftover.parent / ".restore-kv-dead"
        leftover.mkdir(parents=True)
        seen: list[tuple[str, str, int, int]] = []
        [report] = restore_task(
            env, storage, "0_0", SPECS, stores=["kv"], progress=lambda *a: seen.append(a)
        )
        assert report.source == "snapshot" and report.records_replayed == TAIL_KEYS
        assert report.bytes_downloaded > 0
        assert seen[-1] == ("0_0", "kv", report.bytes_downloaded, report.bytes_downloaded)
        assert _live_state(env) == live
        assert not leftover.exists()
    finally:
        env.close()
