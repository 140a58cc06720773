"""``statekeeper platform up|status|down`` (what ``make up|status|down`` run), as a user runs
them: the platform on free ports in a temporary root; the api-server answers, the
statekeeper DAGs are registered and unpaused, a second ``up`` starts nothing, and ``down``
leaves no process behind — by the PID files and by scanning /proc for the root, including a
process that detached into its own session as a launched spark-submit does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from statekeeper.kafka.embedded import free_port
from statekeeper.platform import PlatformConfig
from statekeeper.platform.airflow_api import AirflowClient, health
from statekeeper.platform.control import dag_files
from statekeeper.platform.layout import STATE_STORES_ROUTE
from statekeeper.platform.processes import MARKER_ENV, ProcessRecord, processes_of
from statekeeper.platform.services import airflow_services

STATEKEEPER = str(Path(sys.executable).with_name("statekeeper"))


def _cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [STATEKEEPER, "platform", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _cmdlines_naming(root: Path) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(root) in cmdline:
                found.append(f"{proc.name}: {cmdline}")
    return found


@pytest.mark.slow
def test_up_status_second_up_and_down_leaves_nothing(tmp_path):
    root = tmp_path / "platform"
    ports = ["--airflow-port", str(free_port()), "--broker-port", str(free_port())]
    # No app specs: the DAGs register without tasks and no Spark app is launched (a
    # detached process below stands in for one).
    (tmp_path / "specs").mkdir()
    ports += ["--specs-dir", str(tmp_path / "specs")]
    started = time.monotonic()
    detached = None
    try:
        up = _cli("up", "--root", str(root), *ports)
        up_s = time.monotonic() - started
        assert up.returncode == 0, up.stderr[-3000:]
        result = json.loads(up.stdout)
        print(f"platform up in {up_s:.1f} s (healthy after {result['healthy_after_s']} s)")
        config = PlatformConfig.load(root)
        assert result["ui"] == config.ui_url
        # The State stores address up prints is the plugin's nav entry, as Airflow serves it.
        client = AirflowClient(config.ui_url, "admin", result["password"])
        routes = [
            view.get("url_route")
            for plugin in client._api("/plugins?limit=100")["plugins"]
            for view in plugin.get("external_views") or []
            if view.get("name") == "State stores"
        ]
        assert result["state_stores"] == f"{config.ui_url}/plugin/{STATE_STORES_ROUTE}"
        assert routes == [STATE_STORES_ROUTE]
        with urllib.request.urlopen(result["state_stores"], timeout=10) as page:
            assert page.status == 200  # the UI's app, which renders the nav entry's page

        report = health(config.ui_url)
        assert report is not None and report["metadatabase"]["status"] == "healthy"
        dags = client.dags()
        wanted = result["dags"]
        assert {Path(dags[d]["relative_fileloc"]).name for d in wanted} == set(dag_files(config))
        assert {"statekeeper_snapshots", "statekeeper_restore_drill"} <= set(wanted)
        assert {d: dags[d]["is_paused"] for d in wanted} == dict.fromkeys(wanted, False)

        status = _cli("status", "--root", str(root))
        assert status.returncode == 0, status.stdout
        rows = {r["service"]: r for r in json.loads(status.stdout)["services"]}
        assert set(rows) == {"broker", *(s.name for s in airflow_services(config))}
        assert all(r["running"] and r["pid"] for r in rows.values())
        assert rows["api-server"]["port"] == config.airflow_port
        assert rows["broker"]["port"] == config.broker_port

        again = _cli("up", "--root", str(root))
        assert again.returncode == 0, again.stderr[-3000:]
        assert json.loads(again.stdout)["started"] == []
        after = {
            r["service"]: r["pid"]
            for r in json.loads(_cli("status", "--root", str(root)).stdout)["services"]
        }
        assert after == {name: row["pid"] for name, row in rows.items()}

        # A process in its own session, as a detached spark-submit launched by a DAG is.
        detached = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(600)"],
            env={**os.environ, MARKER_ENV: str(config.root)},
            start_new_session=True,
        )
    finally:
        down_started = time.monotonic()
        down = _cli("down", "--root", str(root), timeout=120)
        print(f"platform down in {time.monotonic() - down_started:.1f} s")
    assert down.returncode == 0, down.stdout + down.stderr[-3000:]
    assert detached is not None and detached.wait(5) is not None
    assert json.loads(down.stdout)["left"] == []
    for service in airflow_services(config):
        record = ProcessRecord.read(config.pid_file(service.name))
        assert record is None  # removed by down
    assert not (config.broker_run_dir / "broker.json").exists()
    assert processes_of(config.root) == []
    assert _cmdlines_naming(config.root) == []
    assert _cli("status", "--root", str(root)).returncode == 3
    print(f"up + checks + down: {time.monotonic() - started:.1f} s")
