"""The platform's view of its apps, without starting the platform: the rows ``platform
status`` and ``up`` print (named, with their condition), the intended stop ``down`` writes
before it signals a launched app, and what a fresh broker's clean-up keeps."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from statekeeper.airflow.supervision.policy import SupervisionConfig, SupervisionRecord
from statekeeper.airflow.supervision.process import AppProcessIdentity
from statekeeper.airflow.supervision.stops import RELAUNCH, read_intended_stops
from statekeeper.airflow.supervision.summary import write_supervision_file
from statekeeper.platform import PlatformConfig
from statekeeper.platform.apps import (
    app_rows,
    launched_app_id,
    record_platform_stops,
    settled,
    wipe_app_data,
)
from statekeeper.platform.report import status_text

SPEC = """
application_id: {app}
enabled: {enabled}
topology: statekeeper.app.launcher:parse_overrides
params: {{pairs: []}}
"""


@pytest.fixture
def config(tmp_path):
    specs = tmp_path / "specs"
    for app, enabled in (("wc", "true"), ("idle", "false")):
        (specs / app).mkdir(parents=True)
        (specs / app / "app.yaml").write_text(SPEC.format(app=app, enabled=enabled))
    return PlatformConfig(root=tmp_path / "platform", specs_dir=specs)


@pytest.fixture
def launched():
    """A detached process named like a launch of app ``wc`` (spark-submit --name ...)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "--name", "statekeeper-wc"],
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while launched_app_id(proc.pid) is None and time.monotonic() < deadline:
        time.sleep(0.05)  # its command line shows once it runs
    yield proc
    proc.kill()
    proc.wait()


def test_down_writes_an_intended_stop_for_each_launch_before_signalling(config, launched):
    assert launched_app_id(launched.pid) == "wc"
    folder = config.app_data_dirs[0] / "wc"
    written = record_platform_stops(config, [launched.pid, 999_999_999], {})
    assert written == {launched.pid: str(folder)}
    [stop] = read_intended_stops(folder)
    assert (stop.pid, stop.by, stop.then) == (launched.pid, "platform down", RELAUNCH)
    identity = AppProcessIdentity.of_launched(
        "wc", launched.pid, time.time(), "log", str(folder / "status.json"), []
    )
    assert identity.intended_stop() == stop


def test_a_fresh_broker_wipes_app_data_but_keeps_supervision_records(config):
    state = config.app_data_dirs[0]
    (state / "wc" / "0_0").mkdir(parents=True)
    (state / "wc" / "0_0" / ".checkpoint").write_text("x")
    (state / "wc" / "status.json").write_text("{}")
    (state / "wc" / "intended_stop.json").write_text("{}")
    (state / "wc" / "supervision.json").write_text("{}")
    (state / "gone" / "1_0").mkdir(parents=True)
    (state / "stray.txt").write_text("x")
    wipe_app_data(state)
    assert sorted(p.relative_to(state).as_posix() for p in state.rglob("*")) == [
        "wc",
        "wc/intended_stop.json",
        "wc/supervision.json",
    ]


def test_status_rows_name_each_app_with_its_condition(config, launched):
    folder = config.app_data_dirs[0] / "wc"
    now = time.time()
    identity = AppProcessIdentity.of_launched(
        "wc", launched.pid, now - 5, "log", str(folder / "status.json"), []
    )
    cfg = SupervisionConfig(max_restarts=5)
    restart = {"at": now - 60, "reason": "process gone: pid 1 exited", "kinds": ["process_gone"]}
    record = SupervisionRecord("wc", identity=identity.to_json(), restarts=[restart])
    write_supervision_file(folder, record, cfg)
    (folder / "status.json").write_text(json.dumps({"state": "RUNNING", "started_at": now - 4}))
    rows = {row["application_id"]: row for row in app_rows(config)}
    assert rows["wc"]["condition"] == "RUNNING" and not rows["wc"]["bad"]
    assert rows["wc"]["restarts_in_window"] == 1 and rows["wc"]["pid"] == launched.pid
    assert rows["idle"]["condition"] == "DISABLED" and not rows["idle"]["bad"]
    assert all(settled(row) for row in rows.values())

    record.identity = None
    record.failed = {"at": now, "reasons": "process gone", "explanation": "5 restart(s) ..."}
    write_supervision_file(folder, record, cfg)
    [wc] = [row for row in app_rows(config) if row["application_id"] == "wc"]
    assert wc["condition"] == "FAILED" and wc["bad"] and settled(wc)
    text = status_text(
        {
            "services": [],
            "apps": [wc],
            "apps_bad": ["wc"],
            "spark_apps": [],
            "running": True,
            "ui": "http://127.0.0.1:1",
            "bootstrap_servers": "127.0.0.1:2",
            "username": "admin",
            "password_file": "p",
        }
    )
    assert "wc             FAILED" in text and "apps need an operator: wc" in text
    assert "action=restart" in text

    record.failed = None
    write_supervision_file(folder, record, cfg)  # no launch recorded, not stopped: down
    [wc] = [row for row in app_rows(config) if row["application_id"] == "wc"]
    assert wc["condition"] == "DOWN" and wc["bad"] and not settled(wc)
