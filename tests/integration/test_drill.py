"""Restore drills against the embedded broker, RocksDB and file:// snapshots.

The live app is the spec app of test_changelog_audit (a count ``totals`` and a windowed
count ``windows`` over a 2-partition source), run in-process the way a Spark task runs it
(StreamTask over the source ranges, commits with markers), with a snapshot between its two
batches, so a drill restores snapshot + changelog tail.
"""

from __future__ import annotations

import json
import struct
import uuid
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from statekeeper.changelog.records import RESERVED_KEY_PREFIX, changelog_topic
from statekeeper.cli import main
from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.model import OffsetRange, tp_key
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.kafka.range_reader import read_ranges
from statekeeper.ops.drill import DrillHistory, history_path
from statekeeper.ops.live_task import open_store_view
from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotStorage, list_snapshots
from statekeeper.state.directory import TaskDirectory, TaskLock
from statekeeper.state.environment import StateEnvironment

from .batch_runs import produce_user_records, run_batches, write_app_spec
from .test_changelog_audit import TOPOLOGY_FILE, _topology

RECORDS = 240  # over 2 partitions and 30 keys
KEYS = 30
TIMEOUT = 20.0


@dataclass
class LiveApp:
    app_id: str
    source: str
    spec: Path
    state_dir: Path
    bootstrap: str

    def specs(self):
        return _topology(self.source).store_specs(0)

    def changelogs(self) -> list[tuple[str, int]]:
        return [(changelog_topic(self.app_id, s.name), p) for s in self.specs() for p in (0, 1)]


def _write_spec(tmp_path: Path, app_id: str, source: str, broker, extra: str = "") -> Path:
    """The spec of an app on test_changelog_audit's topology (``topo.py`` beside it)."""
    return write_app_spec(tmp_path, app_id, source, broker.bootstrap_servers, TOPOLOGY_FILE, extra)


def _live_app(admin, broker, tmp_path: Path) -> LiveApp:
    """Produce the source, then run both tasks for two committed batches with a snapshot of
    each task after the first."""
    app_id = f"drill-{uuid.uuid4().hex[:8]}"
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
    storage = SnapshotStorage(snaps, app_id)
    batches = [(0, 60), (60, RECORDS // 2)]
    run_batches(settings, _topology(source), source, batches, storage, tmp_path / "staging")
    return LiveApp(app_id, source, spec, tmp_path / "state", broker.bootstrap_servers)


def _live_contents(app: LiveApp) -> dict[tuple[str, str], dict[bytes, bytes]]:
    """Raw entries of every live store, read without opening the task."""
    found = {}
    for task in ("0_0", "0_1"):
        directory = TaskDirectory(app.state_dir, app.app_id, task)
        for spec in app.specs():
            db = open_store_view(directory.store_path(spec.name))
            try:
                found[(task, spec.name)] = dict(db.items())
            finally:
                db.close()
    return found


def _untouched(app: LiveApp):
    """What a drill must leave as it was: live store contents and changelog log ends."""
    conf = consumer_config(app.bootstrap)
    return _live_contents(app), log_end_offsets(conf, app.changelogs(), TIMEOUT)


def _drill(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["drill", *argv, "--json"])
    out = capsys.readouterr()
    return code, json.loads(out.out)


def test_healthy_drill_passes_and_writes_everything(admin, broker, tmp_path, capsys):
    app = _live_app(admin, broker, tmp_path)
    before = _untouched(app)
    report = tmp_path / "report"
    code, record = _drill(capsys, "--app", str(app.spec), "--report-dir", str(report))

    assert code == 0, record["failures"]
    assert record["passed"] is True
    assert record["checks"] == {
        "integrity": "pass",
        "consistency": "pass",
        "truth": "pass",
        "quality": "pass",
        "spark": "skipped",
    }
    stores = {(s["task"], s["store"]): s for s in record["stores"]}
    assert set(stores) == {
        (t, s) for t in ("0_0", "0_1") for s in ("totals", "windows", "sk-task-state-0")
    }
    for task in ("0_0", "0_1"):
        totals = stores[(task, "totals")]
        # Snapshot of batch 0, then batch 1's records from the changelog tail.
        assert totals["source"] == "snapshot" and totals["snapshot_id"]
        assert totals["batch_id"] == 1 and totals["key_count"] == KEYS // 2
        assert totals["records_replayed"] > 0
        assert "recomputation from 120 input record(s)" in totals["checks"]["truth"]["detail"]
        assert "live store" in totals["checks"]["consistency"]["detail"]
        assert totals["data_docs"] and Path(totals["data_docs"]).is_file()
    assert all("app stopped" in mode for mode in record["live_mode"].values())
    assert record["rto_s"] > 0 and record["bytes_downloaded"] > 0
    assert record["snapshot_age_s"] is not None and record["source_records_behind"] == 0
    assert record["changelog_records_behind"] == 0

    assert json.loads((report / "record.json").read_text())["drill_id"] == record["drill_id"]
    assert (report / "data_docs" / "index.html").is_file()
    html = (report / "report.html").read_text()
    assert "<svg" in html and "data_docs/index.html" in html
    assert "<script" not in html and "<link" not in html  # one page, works offline
    [row] = DrillHistory(history_path(app.state_dir)).rows(app.app_id)
    assert row.drill_id == record["drill_id"] and row.passed and row.rto_s == record["rto_s"]
    assert not any(report.glob(".sandbox-*"))  # the sandbox is removed
    assert _untouched(app) == before

    # A named snapshot for its store (the others take their newest), and a second history row.
    named = stores[("0_1", "windows")]["snapshot_id"]
    code, again = _drill(
        capsys, "--app", str(app.spec), "--from-snapshot", named, "--report-dir", str(report / "2")
    )
    assert code == 0 and again["passed"], again["failures"]
    assert {s["snapshot_id"] for s in again["stores"] if s["task"] == "0_1"} >= {named}
    assert len(DrillHistory(history_path(app.state_dir)).rows(app.app_id)) == 2
    assert (report / "2" / "report.html").read_text().count("<circle") == 2

    # Bad input exits 2 with the bad thing named.
    assert main(["drill", "--app", str(app.spec), "--from-snapshot", "no-such-id"]) == 2
    assert "no snapshot 'no-such-id'" in capsys.readouterr().err
    assert main(["drill", "--app", app.app_id]) == 2
    assert "drill needs the app spec" in capsys.readouterr().err
    assert main(["drill", "--app", str(app.spec), "--spark"]) == 2
    assert "names no drill_model: in its spec" in capsys.readouterr().err


def test_drill_never_changes_a_running_app(admin, broker, tmp_path, capsys):
    app = _live_app(admin, broker, tmp_path)
    before = _untouched(app)
    dirs = [TaskDirectory(app.state_dir, app.app_id, t) for t in ("0_0", "0_1")]
    locks = [TaskLock(d, 1) for d in dirs]
    for lock in locks:  # the running app holds its tasks
        lock.acquire()
    try:
        code, record = _drill(capsys, "--app", str(app.spec))
        assert not any(d.release_request_file.exists() for d in dirs)  # nobody asked it to let go
    finally:
        for lock in locks:
            lock.release()
    assert code == 0, record["failures"]
    assert all("app running" in mode for mode in record["live_mode"].values())
    totals = next(s for s in record["stores"] if s["store"] == "totals")
    assert totals["checks"]["consistency"]["status"] == "pass"
    assert "snapshot" in totals["checks"]["consistency"]["detail"]
    # Default report dir: under the state root, beside the history.
    report = Path(record["report_dir"])
    assert report.is_relative_to(app.state_dir / ".drills" / app.app_id)
    assert (report / "report.html").is_file()
    assert _untouched(app) == before


def _copy_with_damage(app: LiveApp, admin, broker, tmp_path: Path) -> tuple[Path, list[str]]:
    """A second app reading the same source whose changelogs are copies of the live app's,
    except that in ``totals`` partition 0 one record is left out and one value is altered
    (what a lost or corrupted log segment leaves). Returns its spec and the damaged keys."""
    copy_id = f"{app.app_id}-copy"
    spec = _write_spec(tmp_path, copy_id, app.source, broker)
    env = StateEnvironment(
        load_settings(
            bootstrap_servers=broker.bootstrap_servers,
            state_dir=tmp_path / "state",
            application_id=copy_id,
        )
    )
    env.ensure_changelogs(app.specs(), 2)
    env.close()
    conf = consumer_config(broker.bootstrap_servers)
    ends = log_end_offsets(conf, app.changelogs(), TIMEOUT)
    logs = read_ranges(conf, [OffsetRange(t, p, 0, ends[(t, p)]) for t, p in ends], TIMEOUT)
    totals = logs[tp_key(changelog_topic(app.app_id, "totals"), 0)]
    data = [r for r in totals if not r.key.startswith(RESERVED_KEY_PREFIX)]
    dropped, altered = data[-1], data[-2]  # both of the last batch: nothing supersedes them
    producer = Producer(producer_config(broker.bootstrap_servers))
    for (topic, partition), _ in ends.items():
        store = topic.removeprefix(f"{app.app_id}-").removesuffix("-changelog")
        for r in logs[tp_key(topic, partition)]:
            if r is dropped:
                continue
            value = struct.pack(">q", 999) if r is altered else r.value
            producer.produce(changelog_topic(copy_id, store), value, r.key, partition=partition)
    assert producer.flush(TIMEOUT) == 0
    return spec, [dropped.key.decode(), altered.key.decode()]


def test_drill_of_a_damaged_changelog_fails_naming_the_keys(admin, broker, tmp_path, capsys):
    app = _live_app(admin, broker, tmp_path)
    spec, damaged = _copy_with_damage(app, admin, broker, tmp_path)
    report = tmp_path / "damaged-report"
    argv = ["--app", str(spec), "--report-dir", str(report), "--from-snapshot", "none"]
    code, record = _drill(capsys, *argv)

    assert code == 1
    assert record["passed"] is False and record["checks"]["truth"] == "fail"
    truth = {(s["task"], s["store"]): s["checks"]["truth"] for s in record["stores"]}
    bad = truth[("0_0", "totals")]
    assert bad["status"] == "fail" and sorted(bad["examples"]) == sorted(damaged)
    assert bad["counts"] == {"differ": 2, "missing": 0, "unexpected": 0}
    assert all(c["status"] == "pass" for k, c in truth.items() if k[1] == "windows")
    assert all(s["source"] == "full replay" for s in record["stores"])
    assert any("0_0 totals truth" in f and damaged[0] in f for f in record["failures"])
    # Data Docs and the record are written for a failed drill too.
    assert (report / "data_docs" / "index.html").is_file() and (report / "record.json").is_file()
    # Without --json the failure is printed, naming store and keys.
    assert main(["drill", *argv]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out and "0_0 totals truth" in out and damaged[1] in out


def test_drill_fails_on_a_damaged_snapshot_file(admin, broker, tmp_path, capsys):
    app = _live_app(admin, broker, tmp_path)
    storage = SnapshotStorage((tmp_path / "snaps").as_uri(), app.app_id)
    [manifest] = list_snapshots(storage, "0_0", "totals")
    sst = max((f for f in manifest.files if f.name.endswith(".sst")), key=lambda f: f.size)
    target = Path(storage.shared_path(sst.sha256))
    target.write_bytes(b"x" + target.read_bytes()[1:])

    code, record = _drill(capsys, "--app", str(app.spec), "--report-dir", str(tmp_path / "r"))
    assert code == 1 and record["checks"]["integrity"] == "fail"
    totals = next(s for s in record["stores"] if (s["task"], s["store"]) == ("0_0", "totals"))
    integrity = totals["checks"]["integrity"]
    assert integrity["status"] == "fail"
    assert f"snapshot {manifest.snapshot_id} was skipped" in integrity["detail"]
    assert sst.name in integrity["detail"] and "fails verification" in integrity["detail"]
    # The store still came back, by full replay, and is right.
    assert totals["source"] == "full replay"
    assert totals["checks"]["truth"]["status"] == "pass"
