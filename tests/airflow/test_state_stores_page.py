"""The State stores page: its routes behind Airflow's auth, the drill task's report link, and
the page inside the Airflow UI in headless Chromium.

Real parts only: one ``airflow api-server`` for the module (simple auth manager, the repo's
plugins/ folder, a specs folder holding one app), word_count running on Spark (its status
endpoint answering), a snapshot the running app took, two drills run by the drill DAG
(``dag.test()``, so their tasks have the "Drill report" link; the second after more input,
so the page's RTO/RPO chart shows a trend) and a changelog audit verdict.

The browser test's screenshot goes to a temporary file, or to ``$STATEKEEPER_SCREENSHOT``
when set (``make screenshot`` writes docs/img/state_stores.png with it).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from statekeeper.app.spec import load_app_spec
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.embedded import free_port
from statekeeper.ops.snapshot_app import snapshot_running_app
from statekeeper.snapshots import SnapshotStorage, list_snapshots
from statekeeper.testing.app_process import AppProcess, spark_app_spec
from tests.api_server_http import get, stop_group, token, wait_healthy

from .conftest import DAGS, REPO

# Its module-scoped fixtures run once: the whole module goes to one xdist worker.
pytestmark = pytest.mark.xdist_group("state_stores_page")

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: Where the browser test saves its screenshot when set (relative: to the repo root).
SCREENSHOT_ENV = "STATEKEEPER_SCREENSHOT"
USER = "admin"
LINES = 2000


@dataclass
class Stack:
    """What the module's tests look at."""

    base_url: str
    password: str
    token: str
    app_id: str
    spec: Path
    app: AppProcess
    snapshot_ids: set[str]
    #: The drills, oldest first; the last one's DAG run and task are below.
    drill_ids: list[str]
    drill_id: str
    drill_run_id: str
    drill_task_id: str


def _write_spec(folder: Path, app_id: str, broker: Any, work: Path) -> Path:
    """word_count's spec re-targeted at its own topics, state, checkpoints and snapshots,
    with a status endpoint, alone in ``folder/word_count/``."""
    raw = load_app_spec(spark_app_spec("word_count")).model_dump()
    raw["application_id"] = app_id
    raw["params"] = {"input_topic": f"{app_id}-lines", "output_topic": f"{app_id}-counts"}
    raw["settings"] = {
        **raw["settings"],
        "bootstrap_servers": broker.bootstrap_servers,
        "state_dir": str(work / "state"),
        "checkpoint_dir": str(work / "checkpoints"),
        "snapshot_url": (work / "snapshots").as_uri(),
        "status_port": free_port(),
        "trigger_interval_ms": 200,
    }
    path = folder / "word_count" / "word_count.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(raw))
    return path


def _start_api_server(port: int, specs: Path, password_file: Path, log: Path) -> subprocess.Popen:
    base_url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
        "AIRFLOW__API__BASE_URL": base_url,
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base_url}/execution/",
        "AIRFLOW__CORE__AUTH_MANAGER": (
            "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(password_file),
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_urlsafe(64),
        "STATEKEEPER_SPECS_DIR": str(specs),
    }
    airflow = Path(sys.executable).with_name("airflow")
    cmd = [str(airflow), "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _screenshot_path() -> Path:
    """``$STATEKEEPER_SCREENSHOT`` (relative to the repo root), else a temporary file: a
    plain test run leaves the tree as it was."""
    wanted = os.environ.get(SCREENSHOT_ENV)
    if not wanted:
        return Path(tempfile.mkdtemp(prefix="state-stores-")) / "state_stores.png"
    path = Path(wanted)
    return path if path.is_absolute() else REPO / path


def _generate(broker: Any, topic: str, count: int) -> None:
    """``count`` word_count lines into ``topic`` (2 partitions), as a user would."""
    subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", "generate", "--app", "word-count", "--bootstrap",
         broker.bootstrap_servers, "--topic", topic, "--partitions", "2",
         "--count", str(count), "--no-progress"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip


def _batches(status: dict[str, Any] | None) -> int:
    return int(((status or {}).get("throughput") or {}).get("batches", 0))


def _drill_dag_test(specs: Path) -> Any:
    """The drill DAG parsed with ``specs`` as its specs folder, run once; returns the run."""
    from airflow.dag_processing.dagbag import DagBag

    # dag.test() parses the DAG folder again to store the DAG: the same specs folder then too.
    with pytest.MonkeyPatch.context() as monkey:
        monkey.setenv("STATEKEEPER_SPECS_DIR", str(specs))
        bag = DagBag(dag_folder=DAGS / "statekeeper_restore_drill.py")
        assert bag.import_errors == {}
        return bag.dags["statekeeper_restore_drill"].test()


@pytest.fixture(scope="module")
def stack(request, broker, admin, tmp_path_factory) -> Any:
    """The app running with a snapshot, a drill and an audit; the api-server up and a token."""
    started = time.perf_counter()
    # What `make test` exports: Spark on loopback with this interpreter (the app inherits it).
    for name, value in (("SPARK_LOCAL_IP", "127.0.0.1"), ("PYSPARK_PYTHON", sys.executable),
                        ("PYSPARK_DRIVER_PYTHON", sys.executable)):  # fmt: skip
        os.environ.setdefault(name, value)
    work = tmp_path_factory.mktemp("state-stores")
    specs = work / "specs"
    app_id = f"word-count-{uuid.uuid4().hex[:4]}"
    spec = _write_spec(specs, app_id, broker, work)
    settings = load_app_spec(spec).resolved_settings()
    ensure_topic(admin, f"{app_id}-lines", 2)
    _generate(broker, f"{app_id}-lines", LINES)
    marks = [("generated", time.perf_counter())]
    status_file = Path(settings.state_dir) / app_id / "status.json"
    app = AppProcess(
        spec, {"status_file": str(status_file)}, work / "app.log", stop_when_idle=False
    )
    app.start()
    request.addfinalizer(app.kill9)

    # Airflow's metadata database and the api-server start while Spark warms up.
    request.getfixturevalue("airflow_db")
    password = secrets.token_urlsafe(12)
    password_file = work / "passwords.json"
    password_file.write_text(json.dumps({USER: password}))
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    server_log = work / "api-server.log"
    server = _start_api_server(port, specs, password_file, server_log)
    request.addfinalizer(lambda: stop_group(server, timeout_s=2))  # then SIGKILL: a test server
    marks.append(("api-server started", time.perf_counter()))

    status = app.wait_for(lambda s: (s.get("throughput") or {}).get("batches", 0) >= 1, 240)
    marks.append(("first batch", time.perf_counter()))
    snapshot = snapshot_running_app(status["status_url"], timeout_s=120)
    assert snapshot["state"] == "uploaded", snapshot
    snapshot_ids = {row["snapshot_id"] for row in snapshot["snapshots"]}
    marks.append(("snapshot", time.perf_counter()))
    drill_ids = []
    for attempt in (1, 2):
        if attempt == 2:  # more input, processed: the second drill is further from the snapshot
            before = _batches(app.status())
            _generate(broker, f"{app_id}-lines", LINES // 4)
            app.wait_for(lambda s, b=before: _batches(s) > b, 60)
        run = _drill_dag_test(specs)
        marks.append((f"drill {attempt}", time.perf_counter()))
        [ti] = run.get_task_instances()
        assert ti.state == "success", ti.state
        drill = ti.xcom_pull(task_ids=ti.task_id)
        drill_ids.append(drill["drill_id"])
    audit = subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", "audit", "changelogs", "--app", str(spec),
         "--no-measure", "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert audit.returncode in (0, 1), audit.stderr  # 1: a failing verdict, recorded too

    marks.append(("audit", time.perf_counter()))
    wait_healthy(base_url, server, server_log, 180)
    marks.append(("api-server healthy", time.perf_counter()))
    print("state stores stack:", ", ".join(f"{name} {at - started:.1f} s" for name, at in marks))
    return Stack(
        base_url=base_url,
        password=password,
        token=token(base_url, USER, password),
        app_id=app_id,
        spec=spec,
        app=app,
        snapshot_ids=snapshot_ids,
        drill_ids=drill_ids,
        drill_id=drill["drill_id"],
        drill_run_id=run.run_id,
        drill_task_id=ti.task_id,
    )


def _routes(stack: Stack) -> list[str]:
    drill = f"/statekeeper/drills/{stack.app_id}/{stack.drill_id}"
    return [
        "/statekeeper/",
        "/statekeeper/static/state_stores.js",
        "/statekeeper/api/overview",
        f"/statekeeper/api/apps/{stack.app_id}",
        f"{drill}/report.html",
        f"{drill}/data_docs/index.html",
    ]


def test_every_route_refuses_a_request_without_a_valid_airflow_token(stack):
    for route in _routes(stack):
        url = stack.base_url + route
        assert get(url)[0] == 401, route  # no credentials
        assert get(url, token="not-a-jwt")[0] == 403, route  # a bad Bearer token
        assert get(url, cookie="not-a-jwt")[0] == 403, route  # a bad UI cookie
        assert get(url, token=stack.token)[0] == 200, route
    # No unauthenticated OpenAPI or docs routes on the plugin app.
    for route in ("/statekeeper/openapi.json", "/statekeeper/docs"):
        assert get(stack.base_url + route, token=stack.token)[0] == 404, route


def test_the_ui_cookie_is_accepted_like_a_bearer_token(stack):
    code, body = get(f"{stack.base_url}/statekeeper/api/overview", cookie=stack.token)
    assert code == 200 and stack.app_id in body.decode()


def test_overview_shows_the_running_app_its_stores_snapshots_drill_and_audit(stack):
    code, body = get(f"{stack.base_url}/statekeeper/api/apps/{stack.app_id}", token=stack.token)
    assert code == 200
    app = json.loads(body)
    assert app["errors"] == {}
    assert app["running"] is True and app["state"] == "RUNNING", app["status_note"]
    assert app["status_source"] == "endpoint"
    assert app["last_batch"]["batch_id"] >= 0 and app["lag"] is not None

    stores = {(t["task"], s["store"]): s for t in app["tasks"] for s in t["stores"]}
    assert {("1_0", "word-counts"), ("1_1", "word-counts")} <= set(stores)
    assert all(stores[(t, "word-counts")]["bytes_on_disk"] > 0 for t in ("1_0", "1_1"))
    sources = {s["restore_source"] for s in stores.values()}
    assert sources <= {"new", "full replay", "local state", None} and sources - {None}

    storage = SnapshotStorage(load_app_spec(stack.spec).settings["snapshot_url"], stack.app_id)
    newest = {f"{m.task}/{m.store}": m.snapshot_id for m in list_snapshots(storage)}
    latest = app["snapshots"]["latest"]
    assert {key: row["snapshot_id"] for key, row in latest.items()} == newest
    assert set(newest.values()) == stack.snapshot_ids
    assert all(row["bytes"] > 0 and row["age_s"] >= 0 for row in latest.values())

    # Oldest first, as the trend chart draws them.
    assert [d["drill_id"] for d in app["drills"]] == stack.drill_ids
    for drill in app["drills"]:
        assert drill["passed"] is True
        assert drill["rto_s"] > 0 and drill["rpo_snapshot_age_s"] is not None
        assert drill["urls"]["report"].endswith(f"/{drill['drill_id']}/report.html")
        assert drill["urls"]["data_docs"].endswith(f"/{drill['drill_id']}/data_docs/index.html")
    first, second = app["drills"]
    assert second["rpo_snapshot_age_s"] > first["rpo_snapshot_age_s"]
    [audit] = app["audits"]
    assert audit["verdict"] in ("ok", "warn", "fail") and audit["topics"] >= 2

    code, body = get(f"{stack.base_url}/statekeeper/api/overview", token=stack.token)
    assert [a["application_id"] for a in json.loads(body)["apps"]] == [stack.app_id]


def test_the_drill_task_links_to_its_report_on_the_page(stack):
    links_url = (
        f"{stack.base_url}/api/v2/dags/statekeeper_restore_drill/dagRuns/"
        f"{urllib.parse.quote(stack.drill_run_id)}/taskInstances/{stack.drill_task_id}/links"
    )
    code, body = get(links_url, token=stack.token)
    assert code == 200, body
    link = json.loads(body)["extra_links"]["Drill report"]
    # The worker builds it from [api] base_url; dag.test() here runs without one: a path.
    path = f"/statekeeper/drills/{stack.app_id}/{stack.drill_id}/report.html"
    assert link in (path, stack.base_url + path)
    link = stack.base_url + path
    code, page = get(link, token=stack.token)
    assert code == 200 and stack.drill_id in page.decode()
    assert get(link)[0] == 401


def test_report_files_outside_the_drill_report_directory_are_refused(stack):
    drill = f"{stack.base_url}/statekeeper/drills/{stack.app_id}/{stack.drill_id}"
    assert get(f"{drill}/record.json", token=stack.token)[0] == 200
    for escape in (
        "..%2F..%2Fhistory.sqlite",  # the drill history beside the report directories
        "..%2F..%2F..%2F" + f"{stack.app_id}%2Fstatus.json",
        "%2E%2E/%2E%2E/history.sqlite",
        "%2Fetc%2Fpasswd",
        ".sandbox-x/anything",  # hidden entries (a kept sandbox) are not served
        "no-such-file.html",
    ):
        assert get(f"{drill}/{escape}", token=stack.token)[0] == 404, escape
    assert get(f"{drill[: -len(stack.drill_id)]}nope/report.html", token=stack.token)[0] == 404
    assert (
        get(f"{stack.base_url}/statekeeper/drills/nope/x/report.html", token=stack.token)[0] == 404
    )


def test_nul_and_invalid_bytes_in_a_path_are_404_never_500(stack):
    drill = f"{stack.base_url}/statekeeper/drills/{stack.app_id}/{stack.drill_id}"
    apps = f"{stack.base_url}/statekeeper/api/apps"
    for url in (
        f"{drill}/report%00.html",
        f"{drill}/%00",
        f"{drill}/data_docs%00/index.html",
        f"{drill}/report.html%00",
        f"{drill}/%01report.html",
        f"{drill}/report%FF.html",  # not UTF-8
        f"{drill}/%C0%AE%C0%AE/history.sqlite",  # overlong '..'
        f"{stack.base_url}/statekeeper/drills/{stack.app_id}%00/{stack.drill_id}/report.html",
        f"{stack.base_url}/statekeeper/drills/{stack.app_id}/{stack.drill_id}%00/report.html",
        f"{apps}/{stack.app_id}%00",
        f"{apps}/%FF",
        f"{stack.base_url}/statekeeper/static/state_stores.js%00",
    ):
        code, body = get(url, token=stack.token)
        assert code == 404, (url, code, body[:300])
        assert b"Traceback" not in body
    assert get(f"{drill}/report.html", token=stack.token)[0] == 200


def _supervised(stack: Stack) -> dict[str, Any]:
    """What the supervising DAG writes beside the app's status file after restarting it once
    (the same writer, statekeeper.airflow.supervision.summary): the running launch's identity
    and one restart with its reason."""
    from statekeeper.airflow.supervision.policy import SupervisionConfig, SupervisionRecord
    from statekeeper.airflow.supervision.process import AppProcessIdentity
    from statekeeper.airflow.supervision.summary import write_supervision_file

    status_file = stack.app.status_file
    started = float((stack.app.status() or {}).get("started_at") or time.time())
    identity = AppProcessIdentity.of_launched(
        stack.app_id, stack.app.proc.pid, started - 1, "app.log", str(status_file), []
    )
    restart = {
        "at": started - 1,
        "kinds": ["process_gone"],
        "reason": "process gone: pid 4242 exited",
        "run_id": "scheduled__test",
    }
    record = SupervisionRecord(stack.app_id, identity=identity.to_json(), restarts=[restart])
    write_supervision_file(status_file.parent, record, SupervisionConfig(max_restarts=5))
    return restart


def _cut_over_to(stack: Stack) -> None:
    """An upgrade history as a cut-over from an older version leaves it."""
    from statekeeper.versions.history import CUTOVER, DONE, UpgradeEvent, record_event

    details = {"batch_base": 7, "verify": {"equal": 3, "expected_different": 9, "unexpected": 0}}
    event = UpgradeEvent(CUTOVER, "wc-v0", stack.app_id, DONE, details=details)
    record_event([stack.app.status_file.parent], event)


def test_the_overview_carries_the_supervision_record(stack):
    restart = _supervised(stack)
    code, body = get(f"{stack.base_url}/statekeeper/api/apps/{stack.app_id}", token=stack.token)
    sup = json.loads(body)["supervision"]
    assert code == 200 and sup["condition"] == "RUNNING", sup
    assert (sup["restarts_in_window"], sup["max_restarts"]) == (1, 5)
    assert sup["last_restart"]["reason"] == restart["reason"] and sup["uptime_s"] > 0
    assert sup["failed"] is None


def _browser() -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--window-size=1440,1500", f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}",
    ):  # fmt: skip
        options.add_argument(flag)
    # An explicit driver path: Selenium Manager never looks for one on the network.
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)


@pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (make browser installs it)")
def test_the_page_in_the_airflow_ui_shows_the_app_stores_snapshot_and_drill(stack):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    started = time.perf_counter()
    _supervised(stack)
    _cut_over_to(stack)
    screenshot = _screenshot_path()
    driver = _browser()
    try:
        wait = WebDriverWait(driver, 60)
        driver.get(f"{stack.base_url}/")  # the UI sends us to its login form
        wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys(USER)
        driver.find_element(By.NAME, "password").send_keys(stack.password)
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        wait.until(lambda d: "/auth/login" not in d.current_url)

        # The nav entry opens the page inside the UI (an iframe of the plugin app).
        nav = (By.CSS_SELECTOR, "a[aria-label='State stores']")
        wait.until(ec.element_to_be_clickable(nav))

        def opened(d: Any) -> bool:
            # A click before the UI's router is ready is lost (seen under load): click again.
            if d.current_url.endswith("/plugin/state-stores"):
                return True
            with contextlib.suppress(Exception):
                d.find_element(*nav).click()
            return False

        wait.until(opened)
        frame = wait.until(ec.presence_of_element_located((By.TAG_NAME, "iframe")))
        assert frame.get_attribute("src") == f"{stack.base_url}/statekeeper/"
        driver.switch_to.frame(frame)
        row = wait.until(
            ec.presence_of_element_located((By.CSS_SELECTOR, f"tr[data-app='{stack.app_id}']"))
        )
        assert "RUNNING" in row.text
        # Supervision: its condition, the restarts within the window and the last reason.
        cell = row.find_element(By.CSS_SELECTOR, ".supervision")
        assert cell.get_attribute("data-restarts") == "1" and "1 restart(s)" in cell.text
        reason = driver.find_element(By.CSS_SELECTOR, f"#app-{stack.app_id} .last-restart")
        assert "process gone: pid 4242 exited" in reason.text
        body = driver.find_element(By.TAG_NAME, "body").text
        assert "word-counts" in body  # its stores
        assert all(snapshot_id in body for snapshot_id in stack.snapshot_ids)  # latest snapshots
        assert stack.drill_id in body and "pass" in body  # the drill
        # Its version: the recorded topology, active, and the cut-over that made it so.
        version = driver.find_element(By.CSS_SELECTOR, f"#app-{stack.app_id} .version").text
        assert "active" in version and "since the cutover from" in version
        assert f"wc-v0 → {stack.app_id}" in body and "batches from 7" in body
        points = driver.find_elements(By.CSS_SELECTOR, "svg.trend circle.pass")
        assert len(points) == len(stack.drill_ids)  # the trend chart: one point per drill
        driver.switch_to.default_content()
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        assert driver.save_screenshot(str(screenshot)), screenshot

        # The page on its own, and its drill report link.
        driver.get(f"{stack.base_url}/statekeeper/")
        wait.until(ec.presence_of_element_located((By.LINK_TEXT, "report")))
        driver.get(driver.find_element(By.LINK_TEXT, "report").get_attribute("href"))
        assert stack.drill_id in driver.title
    finally:
        driver.quit()
    print(f"browser test {time.perf_counter() - started:.1f} s; screenshot {screenshot}")


def test_a_stopped_app_shows_its_last_status_and_not_running(stack):
    stack.app.terminate()
    assert stack.app.wait(120) == 0
    code, body = get(f"{stack.base_url}/statekeeper/api/apps/{stack.app_id}", token=stack.token)
    app = json.loads(body)
    assert code == 200 and app["running"] is False
    assert app["state"] == "NOT_RUNNING" and app["last_batch"]["batch_id"] >= 0
    assert app["tasks"] and app["snapshots"]["count"] == len(stack.snapshot_ids)
