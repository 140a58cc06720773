"""An operator's read never writes (issue 22): drills, ``stores list|inspect``, ``restore
--to``, the changelog audit and the State stores page data leave a live app's state
directory byte for byte as it was, whether the app is stopped or holds its task locks.

The proof is a fingerprint of the app's directory (``<state_dir>/<app>/``) taken before and
after each entry point: every directory with its sorted entries and mtime, every file with
its size, mtime and SHA-256. The apps are test_drill's (stores ``totals``, ``windows`` and
the internal task-state store over a 2-partition source), run in-process for three batches
with a snapshot after the first.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from statekeeper.changelog.records import changelog_topic
from statekeeper.cli import main
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.ops.live_task import lock_holder, read_live_store
from statekeeper.ops.overview import app_overview
from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotStorage
from statekeeper.state.directory import TaskDirectory
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.rocksdb import RocksDBKeyValueStore

from .batch_runs import produce_user_records, run_batches
from .test_changelog_audit import _topology
from .test_drill import KEYS, RECORDS, TIMEOUT, LiveApp, _drill, _write_spec

TASKS = ("0_0", "0_1")
PER_PARTITION = RECORDS // 2
BATCHES = [(0, 40), (40, 80), (80, PER_PARTITION)]

Fingerprint = dict[str, tuple]


def fingerprint(root: Path) -> Fingerprint:
    """Every directory under ``root`` (its sorted entries and mtime) and every file (size,
    mtime, SHA-256), keyed by path relative to ``root``. Opens nothing but for reading."""
    found: Fingerprint = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        rel = here.relative_to(root)
        found[f"{rel}/"] = (tuple(sorted(dirnames + filenames)), here.stat().st_mtime_ns)
        for name in filenames:
            path = here / name
            st = path.lstat()
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            found[str(rel / name)] = (st.st_size, st.st_mtime_ns, digest)
    return found


def assert_unchanged(before: Fingerprint, after: Fingerprint, what: str) -> None:
    changed = {
        path: (before.get(path), after.get(path))
        for path in sorted(before.keys() | after.keys())
        if before.get(path) != after.get(path)
    }
    assert not changed, f"{what} changed the live state directory: {changed}"


def _app_dir(app: LiveApp) -> Path:
    return app.state_dir / app.app_id


def _run_app(admin, broker, tmp_path: Path, *, stale: bool) -> LiveApp:
    """Produce the source and run both tasks for three committed batches, snapshotting each
    task after batch 0. ``stale``: put back each task directory as it was after batch 1, so
    the local state is one commit behind its changelogs (what a task that ran on elsewhere,
    or a copy restored from an older backup, leaves)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    app_id = f"reads-{uuid.uuid4().hex[:8]}"
    source = f"{app_id}-input"
    ensure_topic(admin, source, 2)
    snaps = (tmp_path / "snaps").as_uri()
    spec = _write_spec(tmp_path, app_id, source, broker, f", snapshot_url: '{snaps}'")
    produce_user_records(broker.bootstrap_servers, source, RECORDS, KEYS)
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        state_dir=tmp_path / "state",
        application_id=app_id,
    )
    aside = tmp_path / "after-batch-1"

    def keep_batch_1(task, batch: int) -> None:
        if batch == 1 and stale:
            shutil.copytree(task.task_dir.path, aside / task.task_id)

    storage = SnapshotStorage(snaps, app_id)
    run_batches(
        settings, _topology(source), source, BATCHES, storage, tmp_path / "staging", keep_batch_1
    )
    if stale:
        for task_id in TASKS:
            live = TaskDirectory(settings.state_dir, app_id, task_id).path
            shutil.rmtree(live)
            shutil.copytree(aside / task_id, live)
        shutil.rmtree(aside)
    return LiveApp(app_id, source, spec, tmp_path / "state", broker.bootstrap_servers)


@pytest.fixture(scope="module")
def current_app(admin, broker, tmp_path_factory) -> LiveApp:
    """A stopped app whose local state stands at its last commit (batch 2)."""
    return _run_app(admin, broker, tmp_path_factory.mktemp("current"), stale=False)


@pytest.fixture(scope="module")
def stale_app(admin, broker, tmp_path_factory) -> LiveApp:
    """A stopped app whose local state is at batch 1 while its changelogs hold batch 2."""
    return _run_app(admin, broker, tmp_path_factory.mktemp("stale"), stale=True)


def _live_batch(app: LiveApp, task: str, store: str) -> StoreMetadata:
    spec = next(s for s in app.specs() if s.name == store)
    path = TaskDirectory(app.state_dir, app.app_id, task).store_path(store)
    return read_live_store(spec, path, contents=False).metadata


_HOLDER = """
import sys
from statekeeper.state.directory import TaskDirectory, TaskLock
locks = [TaskLock(TaskDirectory(sys.argv[1], sys.argv[2], t), 10) for t in sys.argv[3:]]
for lock in locks:
    lock.acquire()
print("held", flush=True)
sys.stdin.read()
"""


class _RunningApp:
    """Another process holding the app's task locks, as a running app does."""

    def __init__(self, app: LiveApp) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _HOLDER, str(app.state_dir), app.app_id, *TASKS],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "held"

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.mark.parametrize("which", ["current_app", "stale_app"])
def test_drill_of_a_stopped_app_writes_nothing(which, request, capsys) -> None:
    app: LiveApp = request.getfixturevalue(which)
    before = fingerprint(_app_dir(app))
    code, record = _drill(
        capsys,
        "--app",
        str(app.spec),
        "--report-dir",
        str(app.spec.parent / f"r-{uuid.uuid4().hex[:6]}"),
    )
    assert_unchanged(before, fingerprint(_app_dir(app)), f"a drill of the stopped {which}")

    assert code == 0, record["failures"]
    assert record["checks"]["consistency"] == "pass"
    assert all("app stopped" in mode for mode in record["live_mode"].values())
    for store in record["stores"]:
        consistency = store["checks"]["consistency"]
        assert consistency["status"] == "pass", store
        assert store["batch_id"] == 2  # the sandbox restores to the changelogs' last commit
        if which == "current_app":
            assert "the live store (batch 2" in consistency["detail"]
        else:
            # The live store stays at batch 1; a copy restored to its marker matches it.
            assert "restored to the live store's marker" in consistency["detail"]
            assert "live store at batch 1" in consistency["detail"]
    if which == "stale_app":
        assert all(_live_batch(app, t, "totals").batch_id == 1 for t in TASKS)


def test_drill_of_a_running_app_writes_nothing_and_leaves_its_locks(current_app, capsys) -> None:
    app = current_app
    running = _RunningApp(app)
    try:
        before = fingerprint(_app_dir(app))
        for task in TASKS:
            assert lock_holder(TaskDirectory(app.state_dir, app.app_id, task)) == str(
                running.proc.pid
            )
        code, record = _drill(
            capsys, "--app", str(app.spec), "--report-dir", str(app.spec.parent / "r-running")
        )
        assert_unchanged(before, fingerprint(_app_dir(app)), "a drill of the running app")
        assert main(["stores", "list", "--app", str(app.spec), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["stores"]
        argv = ["stores", "inspect", "--app", str(app.spec), "--store", "totals", "--json"]
        assert main(argv) == 0
        assert json.loads(capsys.readouterr().out)["entries"]
        assert_unchanged(before, fingerprint(_app_dir(app)), "stores list|inspect while it runs")
        assert running.proc.poll() is None  # still holding its tasks
    finally:
        running.stop()
    assert code == 0, record["failures"]
    assert all(
        f"task locked by PID {running.proc.pid}" in mode for mode in record["live_mode"].values()
    )


def test_stores_list_and_inspect_write_nothing(current_app, capsys) -> None:
    app = current_app
    before = fingerprint(_app_dir(app))
    assert main(["stores", "list", "--app", str(app.spec), "--json"]) == 0
    copies = json.loads(capsys.readouterr().out)["stores"]
    by = {(c["store"], c["task"]): c for c in copies}
    assert all(by[("totals", t)]["approx_entries"] >= KEYS // 2 for t in TASKS)
    assert_unchanged(before, fingerprint(_app_dir(app)), "stores list")

    argv = ["stores", "inspect", "--app", str(app.spec), "--json"]
    assert main([*argv, "--store", "totals", "--prefix", "user-"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    assert len(entries) == KEYS and sum(e["value"] for e in entries) == RECORDS
    assert main([*argv, "--store", "windows", "--prefix", "user-1"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"]
    assert_unchanged(before, fingerprint(_app_dir(app)), "stores inspect")


def test_restore_to_another_directory_writes_nothing_in_the_live_one(current_app, capsys) -> None:
    app = current_app
    before = fingerprint(_app_dir(app))
    copy_root = app.spec.parent / f"copy-{uuid.uuid4().hex[:6]}"
    assert main(["restore", "--app", str(app.spec), "--to", str(copy_root), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert {s["task"] for s in payload["stores"]} == set(TASKS)
    assert (copy_root / app.app_id / "0_0" / "rocksdb" / "totals" / "CURRENT").is_file()
    assert_unchanged(before, fingerprint(_app_dir(app)), "restore --to")

    inside = _app_dir(app) / "copy"
    assert main(["restore", "--app", str(app.spec), "--to", str(inside)]) == 2
    assert "inside the app's own state" in capsys.readouterr().err
    assert not inside.exists()
    assert_unchanged(before, fingerprint(_app_dir(app)), "a refused restore --to")


def test_changelog_audit_and_overview_write_nothing(current_app, capsys) -> None:
    app = current_app
    before = fingerprint(_app_dir(app))
    code = main(["audit", "changelogs", "--app", str(app.spec), "--json"])
    assert code in (0, 1)  # its verdict on the configs is not what this test is about
    assert json.loads(capsys.readouterr().out)["application_id"] == app.app_id
    assert_unchanged(before, fingerprint(_app_dir(app)), "the changelog audit")

    overview = app_overview(app.spec, status_timeout_s=0.5)
    assert {t["task"] for t in overview["tasks"]} == set(TASKS)
    assert all(s["on_disk"] for t in overview["tasks"] for s in t["stores"])
    assert_unchanged(before, fingerprint(_app_dir(app)), "the overview (State stores page)")


@pytest.mark.parametrize("damage", ["offset_past_end", "other_batch"])
def test_inconsistent_live_store_fails_the_drill_and_is_not_repaired(
    damage, admin, broker, tmp_path, capsys
) -> None:
    app = _run_app(admin, broker, tmp_path, stale=False)
    topic = changelog_topic(app.app_id, "totals")
    end = log_end_offsets(consumer_config(app.bootstrap), [(topic, 0)], TIMEOUT)[(topic, 0)]
    path = TaskDirectory(app.state_dir, app.app_id, "0_0").store_path("totals")
    store = RocksDBKeyValueStore("totals", path)  # the test damages it; no drill does
    try:
        meta = store.read_metadata()
        assert meta.changelog_offset is not None and meta.batch_id == 2
        if damage == "offset_past_end":
            meta.changelog_offset = end + 50
        else:
            meta.batch_id = 7
        store.restore_batch([], meta)
    finally:
        store.close()
    before = fingerprint(_app_dir(app))
    code, record = _drill(capsys, "--app", str(app.spec), "--report-dir", str(tmp_path / "r"))
    assert_unchanged(before, fingerprint(_app_dir(app)), f"a drill of a store with {damage}")

    assert code == 1 and record["checks"]["consistency"] == "fail"
    checks = {(s["task"], s["store"]): s["checks"]["consistency"] for s in record["stores"]}
    bad = checks.pop(("0_0", "totals"))
    assert bad["status"] == "fail"
    assert "live store totals of task 0_0" in bad["detail"]
    assert "inconsistent with its changelog" in bad["detail"] and "not repaired" in bad["detail"]
    if damage == "offset_past_end":
        assert f"marker offset {end + 50} is past the end of changelog {topic}[0]" in bad["detail"]
        assert f"log end offset {end}" in bad["detail"]
    else:
        assert "is the marker of batch 2, but the live store says batch 7" in bad["detail"]
    assert all(c["status"] == "pass" for c in checks.values()), checks
    # The restored copy itself is right: only the live store is reported.
    assert record["checks"]["truth"] == "pass"
    assert any("0_0 totals consistency" in f for f in record["failures"])
    assert _live_batch(app, "0_0", "totals").batch_id == (7 if damage == "other_batch" else 2)
