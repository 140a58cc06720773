"""ops.overview without Spark or a broker: running or not from a real status endpoint and
file, tasks and stores from task directories and the status document, drill rows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from statekeeper.app.status import StatusBoard, StatusServer
from statekeeper.ops.drill.history import DrillHistory, history_path
from statekeeper.ops.drill.record import PASS, CheckResult, DrillRecord, StoreDrill
from statekeeper.ops.overview import app_overview, drill_report_dir, read_app_status
from statekeeper.ops.overview.task_stores import task_rows
from statekeeper.settings import load_settings

APP = "overview-app"


def _settings(tmp_path: Path, **extra):
    return load_settings(application_id=APP, state_dir=tmp_path / "state", **extra)


def test_an_app_is_running_while_its_status_endpoint_answers(tmp_path):
    settings = _settings(tmp_path)
    status_file = tmp_path / "state" / APP / "status.json"
    board = StatusBoard(APP, status_file)
    server = StatusServer(board).start()
    try:
        board.update(state="RUNNING", status_url=server.url, last_batch={"batch_id": 7})
        status = read_app_status(settings)
        assert (status.running, status.source, status.note) == (True, "endpoint", "running")
        assert status.document["last_batch"] == {"batch_id": 7}
    finally:
        server.stop()
    # The endpoint is gone, the file still says RUNNING: not running, last status kept.
    status = read_app_status(settings, timeout_s=0.5)
    assert (status.running, status.source) == (False, "file")
    assert status.note.startswith(f"not running: its status endpoint {server.url}")
    assert status.document["state"] == "RUNNING" and status.document["last_batch"]["batch_id"] == 7


def test_without_an_endpoint_the_pid_decides(tmp_path):
    settings = _settings(tmp_path)
    board = StatusBoard(APP, tmp_path / "state" / APP / "status.json")
    board.update(state="RUNNING")  # this process's pid: alive
    assert read_app_status(settings).running is True
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)  # fmt: skip
    board.update(pid=int(gone.stdout), state="RUNNING")
    status = read_app_status(settings)
    assert status.running is False and "is gone" in status.note
    board.update(pid=os.getpid(), state="NOT_RUNNING")
    assert read_app_status(settings).running is False


def test_an_app_that_never_ran_has_no_status_and_says_so(tmp_path):
    status = read_app_status(_settings(tmp_path))
    assert (status.running, status.source, status.document) == (False, "none", {})
    assert "never ran here" in status.note


def test_tasks_and_stores_join_the_disk_and_the_status_document(tmp_path):
    store_dir = tmp_path / APP / "1_0" / "rocksdb" / "counts"
    store_dir.mkdir(parents=True)
    (store_dir / "000001.sst").write_bytes(b"x" * 1000)
    (tmp_path / APP / "0_0").mkdir()  # a stateless task's directory
    (tmp_path / APP / "not-a-task").mkdir()
    status = {
        "tasks": {
            "1_0": {
                "committed_batch_id": 4,
                "store_entries_approx": {"counts": 12, "recent": 3},
                "restore": [{"store": "counts", "source": "snapshot", "snapshot_id": "s1"}],
            }
        },
        "task_live": {"1_0": {"source_lag": 5}},
    }
    rows = task_rows(tmp_path, APP, status)
    assert [r["task"] for r in rows] == ["0_0", "1_0"]
    stateless, stateful = rows
    assert stateless["stores"] == [] and stateless["source_lag"] is None
    assert stateful["source_lag"] == 5 and stateful["committed_batch_id"] == 4
    counts, recent = stateful["stores"]
    assert (counts["store"], counts["on_disk"], counts["bytes_on_disk"]) == ("counts", True, 1000)
    assert (counts["approx_entries"], counts["restore_source"]) == (12, "snapshot")
    # An in-memory store has no files: it shows through the status document.
    assert (recent["store"], recent["on_disk"], recent["bytes_on_disk"]) == ("recent", False, 0)


def _drill(tmp_path: Path, drill_id: str, passed: bool) -> DrillRecord:
    report_dir = tmp_path / "state" / ".drills" / APP / drill_id
    report_dir.mkdir(parents=True)
    (report_dir / "report.html").write_text("<html></html>")
    check = CheckResult(PASS if passed else "fail", "detail")
    return DrillRecord(
        drill_id=drill_id,
        app=APP,
        started_at=f"2026-01-01T00:00:0{drill_id[-1]}+00:00",
        report_dir=str(report_dir),
        rto_s=0.5,
        snapshot_age_s=30.0,
        source_records_behind=9,
        stores=[StoreDrill("1_0", "counts", "rocksdb", "snapshot", checks={"integrity": check})],
    )


def test_the_overview_of_a_spec_lists_drills_oldest_first_with_their_files(tmp_path):
    settings = _settings(tmp_path, snapshot_url=(tmp_path / "snaps").as_uri())
    spec = tmp_path / "app.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "application_id": APP,
                "topology": "nowhere.py:build",  # never built: the overview reads files only
                "settings": {
                    "state_dir": str(settings.state_dir),
                    "snapshot_url": settings.snapshot_url,
                },
            }
        )  # fmt: skip
    )
    history = DrillHistory(history_path(settings.state_dir))
    history.append(_drill(tmp_path, "d1", passed=True))
    history.append(_drill(tmp_path, "d2", passed=False))

    app = app_overview(spec)
    assert app["errors"] == {} and app["running"] is False
    assert app["snapshots"]["count"] == 0 and "note" in app["snapshots"]
    first, second = app["drills"]
    assert (first["drill_id"], first["passed"], second["passed"]) == ("d1", True, False)
    assert (first["rto_s"], first["rpo_snapshot_age_s"], first["rpo_source_records_behind"]) == (
        0.5, 30.0, 9,
    )  # fmt: skip
    assert first["files"] == {"report": "report.html"}  # no Data Docs written
    assert second["failures"] == ["1_0 counts integrity: detail"]
    assert drill_report_dir([spec], APP, "d2") == tmp_path / "state" / ".drills" / APP / "d2"


def test_the_overview_shows_the_version_and_its_cut_overs(tmp_path):
    from statekeeper.versions.history import CUTOVER, DONE, ROLLBACK, UpgradeEvent, record_event

    state = tmp_path / "state"
    spec = tmp_path / "app.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "application_id": APP,
                "topology": "nowhere.py:build",
                "settings": {"state_dir": str(state)},
            }
        )  # fmt: skip
    )
    assert app_overview(spec)["version"] == {
        "digest": None, "active": True, "why": "enabled in its spec", "upgrades": [],
    }  # fmt: skip
    record_event(
        [state / APP],
        UpgradeEvent(CUTOVER, "old", APP, DONE, at=100.0, details={"batch_base": 7}),
    )
    record_event([state / APP], UpgradeEvent(ROLLBACK, APP, "old", DONE, at=200.0))
    version = app_overview(spec)["version"]
    assert (version["active"], version["why"]) == (False, "superseded by old (rollback done)")
    assert [(u["kind"], u["batch_base"]) for u in version["upgrades"]] == [
        ("rollback", None),
        ("cutover", 7),
    ]
