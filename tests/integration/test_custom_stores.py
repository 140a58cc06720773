"""Custom state stores end to end, without Spark: the SQLite engine of
spark_apps/word_count_sqlite (one ``store.sqlite3`` per task store) behind a key-value store and
behind the segments of a window store, against the embedded broker and file:// snapshots.

- A task's custom stores come back exactly from their changelogs, and from a snapshot (a
  kv-dump built into a fresh SQLite store) plus only the changelog tail; a snapshot of the
  other layout (RocksDB checkpoint vs kv-dump) is skipped for a full replay, saying why.
  ``statekeeper snapshot create`` and ``restore`` (in place and ``--to``) of an app's
  SQLite stores give back the live rows.
- An app spec whose topology file keeps its DSL tables in SQLite (``Materialized.as_(name,
  supplier)``), run in-process as a Spark task runs it (StreamTask over source ranges,
  commits with markers, a snapshot after the first batch): the drill passes; a value changed
  in a live ``store.sqlite3`` fails its consistency check naming the store and key (and
  stays as it is); a damaged kv-dump fails its integrity check; ``stores list|inspect`` show
  the entries and the engine "sqlite".
- Operator reads never write (tests/integration/test_operator_reads_never_write.py's
  fingerprint): drills, ``stores list|inspect`` and ``read_live_task`` leave the app
  directory byte for byte as it was, the app stopped or a writer process holding a task open
  between commits; while that writer commits, every read sees one commit (data and metadata
  agree) and opens nothing under the app directory for writing. The last test replays, file
  state by file state, a commit ending during a view's copy (the view must notice the
  journal going away).
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import shutil
import sqlite3
import struct
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from spark_apps.word_count_sqlite.sqlite_store import (
    DB_FILE,
    JOURNAL_FILE,
    SQLiteStoreSupplier,
)
from statekeeper.app.app_files import import_topology_file
from statekeeper.cli import main
from statekeeper.kafka.admin import ensure_topic
from statekeeper.ops.live_task import lock_holder, read_live_store, read_live_task
from statekeeper.ops.restore import restore_task
from statekeeper.ops.stores.local_stores import list_local_stores
from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotStorage, list_snapshots, snapshot_task
from statekeeper.snapshots.install import installer_for
from statekeeper.snapshots.staging import KV_DUMP_FILE
from statekeeper.state.directory import TaskDirectory
from statekeeper.stores import Stores
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.serdes import IntSerde

from .batch_runs import produce_user_records, run_batches, write_app_spec
from .test_operator_reads_never_write import assert_unchanged, fingerprint
from .test_snapshots import _env

REPO_ROOT = Path(__file__).resolve().parents[2]
SQLITE = SQLiteStoreSupplier()
SIZE, RETENTION = 10_000, 1_000_000
SPECS = [
    Stores.custom("kv", SQLITE).with_serdes("str", "int"),
    Stores.window("win", size_ms=SIZE, retention_ms=RETENTION, supplier=SQLITE).with_serdes(
        "str", "int"
    ),
]
KEYS = 200
TAIL_KEYS = 30


def _fill(task, rng: random.Random, keys: list[int], batch: int) -> None:
    """Batch ``batch``: ``keys`` get new counts, and a window each; one deleted key."""
    kv, win = task.store("kv"), task.store("win")
    kv.put_all([(f"k{i:04d}", rng.randrange(1_000_000)) for i in keys])
    for i in keys:
        win.put(f"k{i:04d}", batch * 1_000 + i, SIZE * (batch % 4))
    kv.delete(f"k{keys[0]:04d}")
    task.commit(batch, {"in:0": batch + 1})


def _typed_state(env, specs=SPECS) -> dict[str, object]:
    """The task's stores as the app reads them (opening the task restores nothing here)."""
    with env.task("0_0", 0, specs) as task:
        return {
            "kv": dict(task.store("kv").all()),
            "win": sorted(task.store("win").all()),
            "batch": task.last_batch_id,
        }


def _sqlite_rows(path: Path) -> tuple[list[tuple[bytes, bytes]], dict]:
    """Raw rows and commit metadata of the SQLite file of a closed store (opened immutable:
    nothing is written, no lock is taken)."""
    db = sqlite3.connect(f"file:{path / DB_FILE}?immutable=1", uri=True)
    try:
        rows = db.execute("SELECT k, v FROM kv ORDER BY k").fetchall()
        [(meta,)] = db.execute("SELECT v FROM meta").fetchall()
    finally:
        db.close()
    return rows, json.loads(meta)


def _raw_state(tmp_path: Path, app: str) -> dict[str, tuple]:
    directory = TaskDirectory(tmp_path / "state", app, "0_0")
    return {spec.name: _sqlite_rows(directory.store_path(spec.name)) for spec in SPECS}


def _comparable(raw: dict[str, tuple]) -> dict[str, tuple]:
    """Rows and the commit a restore must reproduce (epoch and verified offset aside: a
    restore re-verifies)."""
    return {
        name: (rows, {k: meta[k] for k in ("changelog_offset", "batch_id", "source_offsets")})
        for name, (rows, meta) in raw.items()
    }


def test_custom_stores_restore_from_changelog_and_from_snapshot_plus_tail(
    broker, tmp_path, topic_name
):
    env = _env(broker, tmp_path, topic_name, SPECS)
    storage = SnapshotStorage((tmp_path / "snaps").as_uri(), topic_name)
    task_dir = TaskDirectory(tmp_path / "state", topic_name, "0_0")
    rng = random.Random(5)
    try:
        with env.task("0_0", 0, SPECS) as task:
            for batch in range(3):
                _fill(task, rng, rng.sample(range(KEYS), KEYS // 2), batch)
        for spec in SPECS:  # the engine really is SQLite, one file per task store
            assert (task_dir.store_path(spec.name) / DB_FILE).is_file()
        live, raw = _typed_state(env), _raw_state(tmp_path, topic_name)
        assert live["batch"] == 2 and len(live["kv"]) > KEYS // 2 and live["win"]

        # (a) The task directory is gone: the stores come back from the changelogs alone.
        shutil.rmtree(task_dir.path)
        task = env.task("0_0", 0, SPECS)
        outcomes = {o.job.store.name: o for o in task.open()}
        task.close()
        assert all(o.full and o.restored_records > 0 for o in outcomes.values())
        assert _typed_state(env) == live
        assert _comparable(_raw_state(tmp_path, topic_name)) == _comparable(raw)

        # (b) A snapshot, then a tail of two batches committed after it.
        with env.task("0_0", 0, SPECS) as task:
            snapshots = {
                r.manifest.store: r.manifest
                for r in snapshot_task(task, storage, tmp_path / "staging")
            }
            for batch in (3, 4):
                _fill(task, rng, rng.sample(range(KEYS), TAIL_KEYS), batch)
        assert {m.layout for m in snapshots.values()} == {"kv-dump"}
        live, raw = _typed_state(env), _raw_state(tmp_path, topic_name)
        assert live["batch"] == 4

        shutil.rmtree(task_dir.path)
        reports = {r.store: r for r in restore_task(env, storage, "0_0", SPECS)}
        for name, report in reports.items():
            assert report.source == "snapshot", report
            assert report.snapshot_id == snapshots[name].snapshot_id and not report.fallbacks
            assert report.batch_id == 4 and report.bytes_downloaded > 0
        # Only the tail was replayed: per batch TAIL_KEYS puts and a delete (the kv store),
        # TAIL_KEYS windows (the window store).
        assert reports["kv"].records_replayed == 2 * (TAIL_KEYS + 1)
        assert reports["win"].records_replayed == 2 * TAIL_KEYS
        assert _typed_state(env) == live
        assert _comparable(_raw_state(tmp_path, topic_name)) == _comparable(raw)

        # The running app's path: a task opening without local state installs the snapshot.
        shutil.rmtree(task_dir.path)
        installer = installer_for(env.settings, storage, "0_0", 0)
        task = env.task("0_0", 0, SPECS, installer=installer)
        outcomes = {o.job.store.name: o for o in task.open()}
        installs = dict(task.installs)
        task.close()
        assert {name: i["source"] for name, i in installs.items()} == {
            "kv": "snapshot",
            "win": "snapshot",
        }
        assert {n: (o.full, o.restored_records) for n, o in outcomes.items()} == {
            "kv": (False, 2 * (TAIL_KEYS + 1)),
            "win": (False, 2 * TAIL_KEYS),
        }
        assert _typed_state(env) == live
        assert _comparable(_raw_state(tmp_path, topic_name)) == _comparable(raw)
    finally:
        env.close()


def _typed_kv(env, specs) -> dict:
    with env.task("0_0", 0, specs) as task:
        return dict(task.store("kv").all())


@pytest.mark.parametrize("snapshot_engine", ["rocksdb", "sqlite"])
def test_snapshot_of_the_other_layout_is_skipped_for_a_full_replay(
    broker, tmp_path, topic_name, snapshot_engine
):
    """Stores.persistent("kv") and Stores.custom("kv", SQLite) share a changelog format but
    not a snapshot layout: a store switched to the other engine replays its changelog."""
    rocks = [Stores.persistent("kv").with_serdes("str", "int")]
    sqlite = [SPECS[0]]
    before, after = (rocks, sqlite) if snapshot_engine == "rocksdb" else (sqlite, rocks)
    env = _env(broker, tmp_path, topic_name, before)
    storage = SnapshotStorage((tmp_path / "snaps").as_uri(), topic_name)
    rng = random.Random(9)
    try:
        with env.task("0_0", 0, before) as task:
            kv = task.store("kv")
            kv.put_all([(f"k{i:04d}", rng.randrange(1000)) for i in range(KEYS)])
            task.commit(0, {"in:0": 1})
            [result] = snapshot_task(task, storage, tmp_path / "staging")
        live = _typed_kv(env, before)
        shutil.rmtree(TaskDirectory(tmp_path / "state", topic_name, "0_0").path)
        [report] = restore_task(env, storage, "0_0", after)
    finally:
        env.close()
    assert report.source == "full replay" and report.snapshot_id is None
    [fallback] = report.fallbacks
    assert fallback["snapshot_id"] == result.manifest.snapshot_id
    if snapshot_engine == "rocksdb":
        assert result.manifest.layout == "rocksdb-checkpoint"
        assert "is not a kv-dump" in fallback["reason"]
    else:
        assert result.manifest.layout == "kv-dump"
        assert "'kv-dump' is not a RocksDB checkpoint" in fallback["reason"]
    assert report.records_replayed == KEYS
    env = _env(broker, tmp_path, topic_name, after)
    try:
        assert _typed_kv(env, after) == live
    finally:
        env.close()


# -- an app spec whose topology keeps its tables in SQLite ----------------------------------

WIN_SIZE, WIN_GRACE, WIN_RETENTION = 10_000, 2_000, 100_000
TOPOLOGY_FILE = f"""
from spark_apps.word_count_sqlite.sqlite_store import SQLiteStoreSupplier
from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.stores.time_windows import TimeWindows


def build(input_topic):
    sqlite = SQLiteStoreSupplier()
    b = StreamsBuilder()
    stream = b.stream(input_topic, key_serde="str", value_serde="str")
    stream.group_by_key().count(Materialized.as_("totals", sqlite))
    stream.group_by_key().windowed_by(
        TimeWindows.tumbling({WIN_SIZE}, grace_ms={WIN_GRACE})
    ).count(Materialized.as_("windows", sqlite).with_retention({WIN_RETENTION}))
    return b.build()
"""
RECORDS = 240  # over 2 partitions and 30 keys
USERS = 30
PER_PARTITION = RECORDS // 2
TASKS = ("0_0", "0_1")
TIMEOUT = 20.0


@dataclass
class SQLiteApp:
    app_id: str
    source: str
    spec: Path
    state_dir: Path
    snapshots: Path
    bootstrap: str
    _specs: list | None = None

    @property
    def app_dir(self) -> Path:
        return self.state_dir / self.app_id

    def topology(self):
        return import_topology_file(self.spec.parent / "topo.py").build(self.source)

    def specs(self) -> list:
        """The task's store specs (built once: each build probes a new supplier)."""
        if self._specs is None:
            self._specs = self.topology().store_specs(0)
        return self._specs

    def settings(self):
        return load_settings(
            bootstrap_servers=self.bootstrap, state_dir=self.state_dir, application_id=self.app_id
        )

    def store_path(self, task: str, store: str) -> Path:
        return TaskDirectory(self.state_dir, self.app_id, task).store_path(store)


def _write_app_spec(root: Path, app_id: str, source: str, bootstrap: str) -> Path:
    """The app's spec on this module's ``TOPOLOGY_FILE``, its snapshots in ``root/snaps``."""
    snapshots = f", snapshot_url: '{(root / 'snaps').as_uri()}'"
    return write_app_spec(root, app_id, source, bootstrap, TOPOLOGY_FILE, snapshots)


def _run_app(admin, broker, root: Path, batches: list[tuple[int, int]]) -> SQLiteApp:
    """Produce the source, then run both tasks through ``batches`` (source offset ranges per
    partition), each committed, with a snapshot of each task after the first."""
    app_id = f"sqlite-{uuid.uuid4().hex[:8]}"
    source = f"{app_id}-input"
    ensure_topic(admin, source, 2)
    spec = _write_app_spec(root, app_id, source, broker.bootstrap_servers)
    app = SQLiteApp(app_id, source, spec, root / "state", root / "snaps", broker.bootstrap_servers)
    produce_user_records(broker.bootstrap_servers, source, RECORDS, USERS)
    topology = app.topology()
    assert {s.name: s.engine for s in topology.store_specs(0)} == {
        "totals": "sqlite",
        "windows": "sqlite",
        "sk-task-state-0": "rocksdb",
    }
    storage = SnapshotStorage(app.snapshots.as_uri(), app_id)
    run_batches(app.settings(), topology, source, batches, storage, root / "staging")
    return app


def _clone(app: SQLiteApp, root: Path) -> SQLiteApp:
    """The same app (id, changelogs) on a copy of its state and snapshots, to damage."""
    spec = _write_app_spec(root, app.app_id, app.source, app.bootstrap)
    shutil.copytree(app.state_dir, root / "state")
    shutil.copytree(app.snapshots, root / "snaps")
    return SQLiteApp(app.app_id, app.source, spec, root / "state", root / "snaps", app.bootstrap)


@pytest.fixture(scope="module")
def sqlite_app(admin, broker, tmp_path_factory) -> SQLiteApp:
    """A stopped app at batch 1 of both tasks, each with a snapshot of batch 0."""
    return _run_app(
        admin, broker, tmp_path_factory.mktemp("sqlite-app"), [(0, 60), (60, PER_PARTITION)]
    )


def _drill(capsys, app: SQLiteApp, *argv: str) -> tuple[int, dict]:
    report = app.spec.parent / f"report-{uuid.uuid4().hex[:6]}"
    code = main(["drill", "--app", str(app.spec), "--report-dir", str(report), *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _stores(record: dict) -> dict[tuple[str, str], dict]:
    return {(s["task"], s["store"]): s for s in record["stores"]}


def test_drill_of_an_app_with_sqlite_stores_passes(sqlite_app, capsys):
    app = sqlite_app
    before = fingerprint(app.app_dir)
    code, record = _drill(capsys, app)
    assert_unchanged(before, fingerprint(app.app_dir), "a drill of the stopped app")

    assert code == 0, record["failures"]
    assert record["checks"] == {
        "integrity": "pass",
        "consistency": "pass",
        "truth": "pass",
        "quality": "pass",
        "spark": "skipped",  # no Spark check was asked for: the stores are read in-process
    }
    assert all("app stopped" in mode for mode in record["live_mode"].values())
    stores = _stores(record)
    assert set(stores) == {(t, s) for t in TASKS for s in ("totals", "windows", "sk-task-state-0")}
    for task in TASKS:
        for name in ("totals", "windows"):
            store = stores[(task, name)]
            # The kv-dump of batch 0 built into a fresh SQLite store, then batch 1's tail.
            assert store["source"] == "snapshot" and store["snapshot_id"], store
            assert store["batch_id"] == 1 and store["records_replayed"] > 0
            checks = store["checks"]
            assert "the live store (batch 1" in checks["consistency"]["detail"], checks
            assert "matches the checkpoint" in checks["integrity"]["detail"], checks
        totals = stores[(task, "totals")]
        assert totals["key_count"] == USERS // 2
        assert "recomputation from 120 input record(s)" in totals["checks"]["truth"]["detail"]


def _set_value(db_file: Path, key: bytes, value: bytes) -> None:
    """What a stray writer (or bit rot) does to a live store: one value changed in place."""
    db = sqlite3.connect(db_file, isolation_level=None)
    try:
        assert db.execute("UPDATE kv SET v = ? WHERE k = ?", (value, key)).rowcount == 1
    finally:
        db.close()


def _sqlite_value(db_file: Path, key: bytes) -> bytes:
    db = sqlite3.connect(f"file:{db_file}?immutable=1", uri=True)
    try:
        return db.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()[0]
    finally:
        db.close()


def test_drill_fails_on_a_changed_live_sqlite_value_and_leaves_it(sqlite_app, tmp_path, capsys):
    app = _clone(sqlite_app, tmp_path / "clone")
    db_file = app.store_path("0_0", "totals") / DB_FILE
    key = b"user-4"
    bad = IntSerde().serialize(999)
    assert _sqlite_value(db_file, key) != bad
    _set_value(db_file, key, bad)
    before = fingerprint(app.app_dir)
    code, record = _drill(capsys, app)
    assert_unchanged(before, fingerprint(app.app_dir), "a drill of a damaged live store")

    assert code == 1 and record["checks"]["consistency"] == "fail"
    checks = {k: s["checks"]["consistency"] for k, s in _stores(record).items()}
    failed = checks.pop(("0_0", "totals"))
    assert failed["status"] == "fail", failed
    assert failed["examples"] == ["user-4"], failed
    assert failed["counts"] == {"differ": 1, "missing": 0, "unexpected": 0}
    assert all(c["status"] == "pass" for c in checks.values()), checks
    assert any("0_0 totals consistency" in f for f in record["failures"])
    # The restored copy is right (the changelog is): only the live store is reported.
    assert record["checks"]["truth"] == "pass"
    assert _sqlite_value(db_file, key) == bad  # reported, never repaired


def test_drill_fails_on_a_damaged_kv_dump(sqlite_app, tmp_path, capsys):
    app = _clone(sqlite_app, tmp_path / "clone")
    storage = SnapshotStorage(app.snapshots.as_uri(), app.app_id)
    [manifest] = list_snapshots(storage, "0_0", "totals")
    assert manifest.layout == "kv-dump"
    dump = next(f for f in manifest.files if f.name == KV_DUMP_FILE)
    target = Path(storage.shared_path(dump.sha256))
    data = bytearray(target.read_bytes())
    data[-1] ^= 0xFF  # the last value byte: the file still parses
    target.write_bytes(bytes(data))

    code, record = _drill(capsys, app)
    assert code == 1 and record["checks"]["integrity"] == "fail"
    stores = _stores(record)
    totals = stores[("0_0", "totals")]
    integrity = totals["checks"]["integrity"]
    assert integrity["status"] == "fail"
    assert f"snapshot {manifest.snapshot_id} was skipped" in integrity["detail"]
    assert KV_DUMP_FILE in integrity["detail"] and "fails verification" in integrity["detail"]
    # The store still came back, by full replay, and is right.
    assert totals["source"] == "full replay"
    assert totals["checks"]["truth"]["status"] == "pass"
    assert totals["checks"]["consistency"]["status"] == "pass"
    assert all(
        s["checks"]["integrity"]["status"] == "pass"
        for k, s in stores.items()
        if k != ("0_0", "totals")
    )


def test_stores_list_and_inspect_show_sqlite_entries(sqlite_app, capsys):
    app = sqlite_app
    before = fingerprint(app.app_dir)
    copies = {(c.store, c.task): c for c in list_local_stores(app.settings(), app.topology())}
    for task in TASKS:
        totals, windows = copies[("totals", task)], copies[("windows", task)]
        assert (totals.kind, totals.engine) == ("custom", "sqlite")
        assert (windows.kind, windows.engine) == ("window", "sqlite")
        assert copies[("sk-task-state-0", task)].engine == "rocksdb"
        assert totals.on_disk and totals.approx_entries == USERS // 2
        assert totals.bytes_on_disk == (app.store_path(task, "totals") / DB_FILE).stat().st_size

    assert main(["stores", "list", "--app", str(app.spec), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["stores"]
    assert {(c["store"], c["engine"]) for c in listed} == {
        ("totals", "sqlite"),
        ("windows", "sqlite"),
        ("sk-task-state-0", "rocksdb"),
    }

    argv = ["stores", "inspect", "--app", str(app.spec), "--json"]
    assert main([*argv, "--store", "totals", "--prefix", "user-"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    assert len(entries) == USERS and sum(e["value"] for e in entries) == RECORDS
    # user-3 is on partition 1 (i % 2), counted once per 30 records.
    assert main([*argv, "--store", "totals", "--key", "user-3"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == [
        {"task": "0_1", "key": "user-3", "value": RECORDS // USERS, "window_start": None}
    ]
    assert main([*argv, "--store", "windows", "--prefix", "user-1", "--limit", "1000"]) == 0
    windows = json.loads(capsys.readouterr().out)["entries"]
    assert windows and all(e["window_start"] % WIN_SIZE == 0 for e in windows)
    assert sum(e["value"] for e in windows if e["key"] == "user-1") == RECORDS // USERS
    assert_unchanged(before, fingerprint(app.app_dir), "stores list|inspect")


NO_VIEW_TOPOLOGY = TOPOLOGY_FILE.replace(
    "def build(input_topic):\n    sqlite = SQLiteStoreSupplier()",
    "from statekeeper.stores.supplier import StoreSupplier\n\n\n"
    "class NoViewSupplier(SQLiteStoreSupplier):\n"
    "    open_read_only = StoreSupplier.open_read_only  # no read-only view\n\n\n"
    "def build(input_topic):\n    sqlite = NoViewSupplier()",
)


def test_a_supplier_without_a_read_only_view_runs_and_operator_reads_say_why(
    admin, broker, tmp_path, capsys, monkeypatch
):
    """A custom engine without ``open_read_only``: the app runs and restores; the drill
    passes, its consistency check skipped for those stores with the reason; stores list
    shows their entries as unknown; inspect refuses naming the method; nothing written."""
    assert NO_VIEW_TOPOLOGY != TOPOLOGY_FILE
    monkeypatch.setattr(sys.modules[__name__], "TOPOLOGY_FILE", NO_VIEW_TOPOLOGY)
    app = _run_app(admin, broker, tmp_path / "app", [(0, 60), (60, PER_PARTITION)])
    before = fingerprint(app.app_dir)

    code, record = _drill(capsys, app)
    assert code == 0, record["failures"]
    assert record["checks"]["consistency"] == "pass" and record["checks"]["truth"] == "pass"
    stores = _stores(record)
    for task in TASKS:
        consistency = stores[(task, "totals")]["checks"]["consistency"]
        assert consistency["status"] == "skipped", consistency
        assert "has no open_read_only()" in consistency["detail"]
        assert stores[(task, "totals")]["source"] == "snapshot"
        assert stores[(task, "sk-task-state-0")]["checks"]["consistency"]["status"] == "pass"

    copies = {(c.store, c.task): c for c in list_local_stores(app.settings(), app.topology())}
    assert copies[("totals", "0_0")].on_disk and copies[("totals", "0_0")].approx_entries is None
    argv = ["stores", "inspect", "--app", str(app.spec), "--store", "totals"]
    assert main(argv) == 2
    assert "has no open_read_only()" in capsys.readouterr().err
    assert_unchanged(before, fingerprint(app.app_dir), "operator reads of a store without a view")


def _task_rows(app: SQLiteApp, state_dir: Path, task: str) -> dict[str, tuple]:
    """Raw rows and commit of task ``task``'s SQLite stores under ``state_dir``."""
    directory = TaskDirectory(state_dir, app.app_id, task)
    return _comparable(
        {
            spec.name: _sqlite_rows(directory.store_path(spec.name))
            for spec in app.specs()
            if spec.engine == "sqlite"
        }
    )


def test_snapshot_and_restore_cli_of_sqlite_stores(sqlite_app, tmp_path, capsys):
    app = _clone(sqlite_app, tmp_path / "clone")
    live = {t: _task_rows(app, app.state_dir, t) for t in TASKS}
    assert main(["snapshot", "create", "--app", str(app.spec), "--json"]) == 0
    created = {(s["task"], s["store"]): s for s in json.loads(capsys.readouterr().out)["snapshots"]}
    assert all(created[(t, "totals")]["key_count"] == USERS // 2 for t in TASKS)
    storage = SnapshotStorage(app.snapshots.as_uri(), app.app_id)
    layouts = {m.store: m.layout for m in list_snapshots(storage)}
    assert layouts == {
        "totals": "kv-dump",
        "windows": "kv-dump",
        "sk-task-state-0": "rocksdb-checkpoint",
    }

    # A copy elsewhere, the live state untouched, then the live state itself.
    before = fingerprint(app.app_dir)
    copy = tmp_path / "copy"
    assert main(["restore", "--app", str(app.spec), "--to", str(copy), "--json"]) == 0
    restored = json.loads(capsys.readouterr().out)["stores"]
    assert_unchanged(before, fingerprint(app.app_dir), "restore --to")
    shutil.rmtree(app.app_dir)
    assert main(["restore", "--app", str(app.spec), "--json"]) == 0
    in_place = json.loads(capsys.readouterr().out)["stores"]
    for reports in (restored, in_place):
        for report in reports:
            snapshot = created[(report["task"], report["store"])]["snapshot_id"]
            assert (report["source"], report["snapshot_id"]) == ("snapshot", snapshot), report
            assert report["records_replayed"] == 0 and report["batch_id"] == 1
    for task in TASKS:
        assert _task_rows(app, copy, task) == live[task]
        assert _task_rows(app, app.state_dir, task) == live[task]


# -- operator reads never write, a writer holding a task and committing -----------------------

#: A running app's task in another process: opens task 0_<p> of the app (taking its lock,
#: restoring nothing: the state is local), then per line on stdin commits that many batches
#: of ``step`` source records each, printing where it stands; "0" closes the task.
_WRITER = """
import json, sys, time
from pathlib import Path
from statekeeper.app.app_files import import_topology_file
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.model import OffsetRange, tp_key
from statekeeper.kafka.range_reader import read_ranges
from statekeeper.processing.output_producer import OutputProducer
from statekeeper.processing.stream_task import StreamTask
from statekeeper.settings import load_settings
from statekeeper.state.environment import StateEnvironment

cfg = json.loads(sys.argv[1])
app_id, source, p = cfg["app_id"], cfg["source"], cfg["partition"]
settings = load_settings(
    bootstrap_servers=cfg["bootstrap"], state_dir=cfg["state_dir"], application_id=app_id
)
topology = import_topology_file(Path(cfg["topology"])).build(source)
env = StateEnvironment(settings)
outputs = OutputProducer(cfg["bootstrap"])
conf = consumer_config(cfg["bootstrap"])
task = env.task(f"0_{p}", p, topology.store_specs(0))
task.open()
batch, offset = task.last_batch_id + 1, task.committed_offsets[tp_key(source, p)]
print("open", batch - 1, offset, flush=True)
for line in sys.stdin:
    if int(line) == 0:
        break
    for _ in range(int(line)):
        end = offset + cfg["step"]
        records = read_ranges(conf, [OffsetRange(source, p, offset, end)], 20.0)
        StreamTask(topology, 0, p, task, outputs, app_id).process_batch(
            batch, 1_000_000 + batch, records
        )
        outputs.flush(20.0)
        task.commit(batch, {tp_key(source, p): end})
        batch, offset = batch + 1, end
        time.sleep(cfg["pause_s"])
    print("at", batch - 1, offset, flush=True)
task.close()
outputs.close()
env.close()
print("closed", flush=True)
"""
WRITER_STEP = 5


class _Writer:
    """:data:`_WRITER` running task 0_<partition> of ``app``."""

    def __init__(self, app: SQLiteApp, partition: int) -> None:
        cfg = {
            "app_id": app.app_id,
            "source": app.source,
            "partition": partition,
            "bootstrap": app.bootstrap,
            "state_dir": str(app.state_dir),
            "topology": str(app.spec.parent / "topo.py"),
            "step": WRITER_STEP,
            "pause_s": 0.1,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, json.dumps(cfg)],
            cwd=REPO_ROOT,  # the topology file imports spark_apps
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.batch, self.offset = self._expect("open")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put("")

    def _expect(self, word: str, line: str | None = None) -> tuple[int, int]:
        """(batch, source offset) from the writer's next line, which must be ``word ...``."""
        if line is None:
            line = self.lines.get(timeout=60)
        assert line.startswith(word), f"writer said {line!r} (exit {self.proc.poll()})"
        _, batch, offset = line.split()
        return int(batch), int(offset)

    def commit(self, batches: int) -> None:
        """Ask for ``batches`` commits; :meth:`done` says when they are made."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{batches}\n")
        self.proc.stdin.flush()

    def done(self) -> bool:
        try:
            line = self.lines.get_nowait()
        except queue.Empty:
            return False
        self.batch, self.offset = self._expect("at", line)
        return True

    def wait(self) -> None:
        self.batch, self.offset = self._expect("at")

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.commit(0)
                assert self.lines.get(timeout=60).startswith("closed")
            assert self.proc.wait(timeout=30) == 0
        finally:
            if self.proc.poll() is None:  # never leave it running, whatever failed
                self.proc.kill()
                self.proc.wait()


class _WriteWatch:
    """Python-level writes under one directory while active, seen through audit events
    (PEP 578): opens for writing, SQLite connections, renames, removals, new directories,
    links into it, attribute changes and file locks. Native code (RocksDB, SQLite) is not
    seen; what it does shows in the byte-for-byte fingerprints."""

    _WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    _ANY_PATH = {
        "sqlite3.connect",
        "os.remove",
        "os.rmdir",
        "os.mkdir",
        "os.truncate",
        "os.utime",
        "os.chmod",
        "os.chown",
        "os.setxattr",
        "os.removexattr",
        "shutil.rmtree",
        "shutil.move",
    }
    _SECOND_PATH = {"os.link", "os.symlink", "os.rename", "shutil.copyfile", "shutil.copytree"}

    def __init__(self) -> None:
        self.installed = False
        self.root: str | None = None
        self.seen: list[tuple[str, str]] = []

    def _under(self, path: object) -> str | None:
        if isinstance(path, int):  # a descriptor: where it points
            try:
                path = os.readlink(f"/proc/self/fd/{path}")
            except OSError:
                return None
        if not isinstance(path, str | bytes | os.PathLike):
            return None
        text = os.fsdecode(os.fspath(path))
        full = os.path.abspath(text)
        assert self.root is not None
        return full if full == self.root or full.startswith(self.root + os.sep) else None

    def __call__(self, event: str, args: tuple) -> None:
        if self.root is None or not args:
            return
        if event == "open":
            path, mode, flags = (list(args) + [None, None])[:3]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & self._WRITE_FLAGS
            )
            hit = self._under(path) if writes else None
        elif event in self._ANY_PATH:
            hit = self._under(args[0])
        elif event in ("os.rename", "shutil.move"):
            hit = self._under(args[0]) or self._under(args[1])
        elif event in self._SECOND_PATH:
            hit = self._under(args[1])
        elif event in ("fcntl.flock", "fcntl.lockf"):
            hit = self._under(args[0])
        else:
            return
        if hit is not None:
            self.seen.append((event, hit))

    def watch(self, root: Path) -> _WriteWatch:
        if not self.installed:  # once per process: an audit hook cannot be removed
            sys.addaudithook(self)
            self.installed = True
        self.root, self.seen = os.path.realpath(root), []
        return self

    def __enter__(self) -> _WriteWatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.root = None


_WATCH = _WriteWatch()  # inert (one None check) outside `with _WATCH.watch(...)`


def _counts(app: SQLiteApp, task: str) -> dict[str, tuple[int | None, int | None, int]]:
    """Per SQLite store of ``task``, as operator reads see its live copy
    (:func:`read_live_store`: the supplier's read-only view): (batch id, next source offset,
    sum of the counts). One commit's view has ``sum == offset``."""
    decode = IntSerde().deserialize
    found = {}
    for spec in app.specs():
        if spec.engine != "sqlite":
            continue
        live = read_live_store(spec, app.store_path(task, spec.name))
        meta = live.metadata
        found[spec.name] = (
            meta.batch_id,
            meta.source_offsets.get(f"{app.source}:{task[-1]}"),
            sum(decode(v) for v in (live.contents or {}).values()),
        )
    return found


def _but_info_logs(found: dict[str, tuple]) -> dict[str, tuple]:
    """A fingerprint without RocksDB's info logs (the internal task-state store is RocksDB):
    a RocksDB the writer holds open appends its stats to ``LOG`` on its own schedule (about
    2 s after the open), whoever reads. The writer's own files, like its ``LOCK``."""
    return {p: v for p, v in found.items() if not re.search(r"/rocksdb/[^/]+/LOG(\.old\.\d+)?$", p)}


def _operator_reads(app: SQLiteApp, capsys) -> None:
    """``stores list|inspect`` and ``read_live_task`` of every task (the drill runs apart)."""
    assert main(["stores", "list", "--app", str(app.spec), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stores"]
    argv = ["stores", "inspect", "--app", str(app.spec), "--json", "--store"]
    for store in ("totals", "windows"):
        assert main([*argv, store, "--limit", "1000"]) == 0
        assert json.loads(capsys.readouterr().out)["entries"]
    for task in TASKS:
        assert read_live_task(app.settings(), task, app.specs()).stores


def test_operator_reads_never_write_sqlite_stores_stopped_or_written(
    admin, broker, tmp_path, capsys
):
    # Both tasks at source offset 80 of 120; the writer runs task 0_0 on from there.
    app = _run_app(admin, broker, tmp_path, [(0, 40), (40, 80)])
    writer = _Writer(app, 0)
    try:
        assert (writer.batch, writer.offset) == (1, 80)
        writer.commit(2)
        writer.wait()
        assert (writer.batch, writer.offset) == (3, 90)
        pid = str(writer.proc.pid)
        assert lock_holder(TaskDirectory(app.state_dir, app.app_id, "0_0")) == pid

        # The writer holds task 0_0 open between commits: byte for byte, nothing changes.
        before = _but_info_logs(fingerprint(app.app_dir))
        code, record = _drill(capsys, app)
        _operator_reads(app, capsys)
        assert _counts(app, "0_0") == {"totals": (3, 90, 90), "windows": (3, 90, 90)}
        after = _but_info_logs(fingerprint(app.app_dir))
        assert_unchanged(before, after, "reads while the writer holds 0_0")
        assert code == 0, record["failures"]
        assert f"task locked by PID {pid}" in record["live_mode"]["0_0"]
        assert "app stopped" in record["live_mode"]["0_1"]
        assert all(s["checks"]["consistency"]["status"] == "pass" for s in record["stores"])

        # The writer commits 6 batches while reads run: each read sees one commit of each
        # store (its counts sum to its source offset), and none opens a live file to write.
        seen: set[int | None] = set()
        with _WATCH.watch(app.app_dir):
            writer.commit((PER_PARTITION - 90) // WRITER_STEP)
            deadline = time.monotonic() + 120
            reads = 0
            while not writer.done():
                assert time.monotonic() < deadline, "the writer did not finish its commits"
                for name, (batch, offset, total) in _counts(app, "0_0").items():
                    assert total == offset, f"{name}: a view mixing commits {batch}"
                    seen.add(batch)
                reads += 1
                if reads % 10 == 0:
                    _operator_reads(app, capsys)
        assert not _WATCH.seen, _WATCH.seen
        assert (writer.batch, writer.offset) == (9, PER_PARTITION)
        assert len(seen) >= 2, seen  # the reads overlapped the commits
        assert _counts(app, "0_0") == {
            "totals": (9, PER_PARTITION, PER_PARTITION),
            "windows": (9, PER_PARTITION, PER_PARTITION),
        }
    finally:
        writer.close()

    # Stopped again: a drill and every read leave the directory as the writer left it.
    before = fingerprint(app.app_dir)
    with _WATCH.watch(app.app_dir):
        code, record = _drill(capsys, app)
        _operator_reads(app, capsys)
    assert_unchanged(before, fingerprint(app.app_dir), "reads of the stopped app")
    assert not _WATCH.seen, _WATCH.seen
    assert code == 0, record["failures"]
    assert all("app stopped" in mode for mode in record["live_mode"].values())
    stores = _stores(record)
    assert stores[("0_0", "totals")]["batch_id"] == 9
    assert "the live store (batch 9" in stores[("0_0", "totals")]["checks"]["consistency"]["detail"]


def _hot_journal(old: bytes, changed: list[int], page: int) -> bytes:
    """The rollback journal SQLite writes (and syncs) before a commit touches the db file:
    the original content of each page it changes (www.sqlite.org/fileformat.html, "The
    Rollback Journal")."""
    nonce = 0x5EED
    header = (
        bytes.fromhex("d9d505f920a163d7")
        + struct.pack(">IIIII", len(changed), nonce, len(old) // page, 512, page)
    ).ljust(512, b"\0")
    records = b""
    for number in changed:
        data = old[(number - 1) * page : number * page]
        checksum = (nonce + sum(data[i] for i in range(page - 200, 0, -200))) & 0xFFFFFFFF
        records += struct.pack(">I", number) + data + struct.pack(">I", checksum)
    return header + records


def test_sqlite_view_copied_while_a_commit_ends_shows_one_commit(tmp_path, monkeypatch):
    """The file states a reader can meet while a commit lands (rollback journal): the
    journal holds the original pages, then SQLite writes the dirty pages in page order, page
    1 (with the change counter) first, then deletes the journal. A view reading the counter
    after page 1 was written, copying the db before the other pages were and the journal
    after the commit deleted it sees the counter unchanged and no journal to roll back:
    data of one commit, metadata of the other."""
    directory = tmp_path / "live"
    store = SQLITE.get("kv", directory)
    try:
        store.put(b"k", b"old")
        store.commit(StoreMetadata(changelog_offset=1, batch_id=1, source_offsets={"in:0": 1}))
        old = (directory / DB_FILE).read_bytes()
        store.put(b"k", b"new")
        store.commit(StoreMetadata(changelog_offset=3, batch_id=2, source_offsets={"in:0": 2}))
        new = (directory / DB_FILE).read_bytes()
    finally:
        store.close()
    page = int.from_bytes(new[16:18], "big")
    changed = [
        i // page + 1 for i in range(0, len(new), page) if new[i : i + page] != old[i : i + page]
    ]
    # The commit rewrote page 1 (its counter), the kv table's page 2 and the meta table's
    # pages after it (its rows and its key's index).
    assert len(old) == len(new) and changed == list(range(1, len(new) // page + 1))
    assert len(changed) >= 3
    torn = new[: 2 * page] + old[2 * page :]  # pages 1 and 2 written, the others not yet
    journal = _hot_journal(old, changed, page)
    # Torn db + journal is a real mid-commit state: SQLite rolls a copy back to batch 1.
    check = tmp_path / "check"
    check.mkdir()
    (check / DB_FILE).write_bytes(torn)
    (check / JOURNAL_FILE).write_bytes(journal)
    db = sqlite3.connect(check / DB_FILE)
    try:
        assert db.execute("SELECT v FROM kv").fetchall() == [(b"old",)]
        assert json.loads(db.execute("SELECT v FROM meta").fetchone()[0])["batch_id"] == 1
    finally:
        db.close()

    (directory / DB_FILE).write_bytes(torn)
    (directory / JOURNAL_FILE).write_bytes(journal)
    real_copyfile = shutil.copyfile

    def copy_while_the_commit_ends(src, dst, *args, **kwargs):
        copied = real_copyfile(src, dst, *args, **kwargs)
        if Path(src) == directory / DB_FILE and (directory / JOURNAL_FILE).exists():
            # The other pages land and the journal goes: the commit is done.
            (directory / DB_FILE).write_bytes(new)
            (directory / JOURNAL_FILE).unlink()
        return copied

    monkeypatch.setattr(shutil, "copyfile", copy_while_the_commit_ends)
    with SQLITE.open_read_only("kv", directory) as view:
        seen = (view.get(b"k"), view.read_metadata().batch_id)
    assert seen in ((b"old", 1), (b"new", 2)), f"a view mixing two commits: {seen}"
