"""``up``, ``down`` and ``status`` of the embedded platform: the broker and Airflow on
127.0.0.1, with the statekeeper DAGs unpaused and the apps DAG triggered.

``up`` is idempotent: it starts only what is not running (a second ``up`` starts nothing).
``down`` stops the services by their PID files (SIGTERM, wait, SIGKILL), scheduler first so
nothing new is launched, then sweeps every process still carrying the platform's marker (the
Spark apps the DAGs launched, task runners), the broker last so apps can stop cleanly. Each
app's stop is written down first (an intended stop, :mod:`statekeeper.platform.apps`), so
the supervisor relaunches it after the next ``up`` without counting a crash.

``up`` and ``status`` name each app with its condition (RUNNING, REBALANCING, FAILED, DOWN,
...); ``up`` waits (``apps_timeout_s``) until every app runs or is FAILED/stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from statekeeper.errors import StatekeeperError
from statekeeper.kafka import embedded
from statekeeper.platform import airflow_api
from statekeeper.platform.airflow_env import PASSWORDS_FILE, admin_password, platform_env
from statekeeper.platform.apps import app_rows, record_platform_stops, wait_for_apps, wipe_app_data
from statekeeper.platform.layout import PlatformConfig
from statekeeper.platform.processes import (
    MARKER_ENV,
    ProcessRecord,
    exited_early,
    processes_of,
    start_process,
    stop_pids,
    stop_process,
    sweep,
)
from statekeeper.platform.seed import Seeding, apps_to_seed
from statekeeper.platform.services import BROKER, Service, airflow_binary, airflow_services
from statekeeper.procfs import group_members, parent_pid, process_group

#: The DAG that launches and supervises the apps (dags/statekeeper_apps.py).
APPS_DAG = "statekeeper_apps"
DAG_PREFIX = "statekeeper_"
#: How long `up` waits for the scheduler to start a just-unpaused apps DAG before triggering.
UNPAUSE_RUN_WAIT_S = 15.0

Say = Callable[[str], None]


class PlatformError(StatekeeperError):
    """The platform could not be started or stopped; the message names the logs to read."""


def _quiet(_: str) -> None:
    pass


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As servers bind: a port with connections in TIME_WAIT is free for them.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@contextlib.contextmanager
def _marked_environ(config: PlatformConfig) -> Iterator[None]:
    """Processes started in-process (the broker) inherit the platform's marker."""
    old = os.environ.get(MARKER_ENV)
    os.environ[MARKER_ENV] = str(config.root)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(MARKER_ENV, None)
        else:
            os.environ[MARKER_ENV] = old


def dag_files(config: PlatformConfig) -> list[str]:
    """The statekeeper DAG files of the dags/ folder (``statekeeper_*.py``)."""
    return sorted(p.name for p in (config.repo / "dags").glob(f"{DAG_PREFIX}*.py"))


# -- up ------------------------------------------------------------------------------------


def _start_broker(config: PlatformConfig, say: Say) -> bool:
    status = embedded.broker_status(config.broker_run_dir)
    if status["running"]:
        say(f"broker already running on {status['bootstrap_servers']} (pid {status['tansu_pid']})")
        return False
    if not _port_free(config.broker_port):
        raise PlatformError(
            f"port {config.broker_port} on 127.0.0.1 is in use (another broker? "
            "`statekeeper broker stop`); choose another: make up BROKER_PORT=<port>"
        )
    # In memory, as the tests and the demo run it: with durable (S3) storage, Tansu 0.6 does not
    # reliably answer the 10 ms fetch.wait.max.ms fetches the partition reader makes (measured;
    # docs/brokers.md).
    with _marked_environ(config):
        broker = embedded.EmbeddedBroker(
            config.broker_port, run_dir=config.broker_run_dir, detach=True
        ).start()
    pid = broker.state.tansu_pid if broker.state else "?"
    say(f"broker on {broker.bootstrap_servers} (pid {pid}, in memory)")
    stale = [d for d in config.app_data_dirs if d.exists()]
    if _spark_apps(config):  # apps outlived the broker: leave their files, they may be used
        stale = []
    for folder in stale:
        wipe_app_data(folder)
    if stale:
        say(
            f"fresh broker: removed the previous one's {', '.join(d.name for d in stale)} "
            "(kept supervision's records)"
        )
    return True


def _migrate(config: PlatformConfig, env: dict[str, str], say: Say) -> None:
    log = config.log_file("airflow-db-migrate")
    started = time.monotonic()
    with open(log, "ab") as out:
        done = subprocess.run(
            [airflow_binary(), "db", "migrate"],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=config.root,
            timeout=120,
            check=False,
        )
    if done.returncode != 0:
        raise PlatformError(f"airflow db migrate failed; see {log}:\n{_tail(log)}")
    say(f"airflow db migrate: {time.monotonic() - started:.1f} s (SQLite, {config.airflow_home})")


def _running(config: PlatformConfig, service: str) -> ProcessRecord | None:
    record = ProcessRecord.read(config.pid_file(service))
    return record if record is not None and record.alive() else None


def _check_ports(config: PlatformConfig) -> None:
    """Fail before starting anything when a port of a service to start is taken."""
    for service in airflow_services(config):
        taken = service.port is not None and not _port_free(service.port)
        if taken and not _running(config, service.name):
            raise PlatformError(
                f"port {service.port} on 127.0.0.1 (for the {service.name}) is in use; "
                "choose another: make up AIRFLOW_PORT=<port>"
            )


def _start_airflow(config: PlatformConfig, env: dict[str, str], say: Say) -> list[ProcessRecord]:
    missing: list[Service] = [s for s in airflow_services(config) if not _running(config, s.name)]
    if not missing:
        say("Airflow already running")
        return []
    _migrate(config, env, say)
    started = []
    for service in missing:
        record = start_process(
            service.name,
            service.argv,
            env=env,
            log=config.log_file(service.name),
            pid_file=config.pid_file(service.name),
            cwd=config.root,
            port=service.port,
        )
        started.append(record)
        say(f"{service.name}: pid {record.pid}, log {record.log}")
    return started


def _wait_healthy(config: PlatformConfig, started: list[ProcessRecord], deadline: float) -> None:
    while True:
        for record in started:
            if exited_early(record):
                raise PlatformError(
                    f"the {record.name} exited while starting; see {record.log}:\n"
                    f"{_tail(Path(record.log))}"
                )
        report = airflow_api.health(config.ui_url)
        bad = airflow_api.unhealthy_components(report)
        if not bad:
            return
        if time.monotonic() > deadline:
            logs = ", ".join(str(config.log_file(s.name)) for s in airflow_services(config))
            raise PlatformError(
                f"Airflow not healthy in time at {config.ui_url} (not yet: {', '.join(bad)}); "
                f"logs: {logs}"
            )
        time.sleep(0.5)


def _wait_for_dags(
    client: airflow_api.AirflowClient, files: list[str], deadline: float
) -> dict[str, dict[str, Any]]:
    """The registered DAGs, once every file of ``files`` has one; raises on an import error
    of one of them."""
    while True:
        dags = client.dags()
        seen = {Path(d.get("relative_fileloc") or "").name for d in dags.values()}
        missing = [f for f in files if f not in seen]
        if not missing:
            return dags
        errors = [e for e in client.import_errors() if Path(e["filename"]).name in missing]
        if errors:
            first = errors[0]
            raise PlatformError(
                f"DAG file {first['filename']} does not import:\n{first['stack_trace'][-1500:]}"
            )
        if time.monotonic() > deadline:
            raise PlatformError(f"no DAG registered in time from {', '.join(missing)}")
        time.sleep(0.5)


def _run_appears(client: airflow_api.AirflowClient, dag_id: str, runs_before: int | None) -> bool:
    """True when ``dag_id`` has a queued or running run or, when it was unpaused a moment ago
    with ``runs_before`` runs, a new run: the scheduler starts its scheduled run within a few
    loops, so wait for that rather than add a second."""
    deadline = time.monotonic() + (UNPAUSE_RUN_WAIT_S if runs_before is not None else 0.0)
    while True:
        if client.active_runs(dag_id):
            return True
        if runs_before is not None and client.run_count(dag_id) > runs_before:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


def up(
    config: PlatformConfig,
    *,
    timeout_s: float = 180.0,
    apps_timeout_s: float = 180.0,
    say: Say = _quiet,
) -> dict[str, Any]:
    """Start what is not running, wait until Airflow is healthy and the statekeeper DAGs are
    registered, unpause them and trigger the apps DAG, then wait up to ``apps_timeout_s``
    (0: not at all) until every app runs (or is FAILED, stopped, disabled). Raises
    PlatformError naming the logs when something does not come up within ``timeout_s``.
    The result's ``apps`` names each app's condition; ``apps_bad`` the ones that need an
    operator (FAILED, DOWN, ERROR)."""
    started_at = time.monotonic()
    deadline = started_at + timeout_s
    for folder in (config.run_dir, config.logs_dir, config.airflow_home):
        folder.mkdir(parents=True, exist_ok=True)
    config.save()
    password = admin_password(config)
    env = platform_env(config)

    _check_ports(config)
    broker_started = _start_broker(config, say)
    seeding = Seeding(config, env, apps_to_seed(config) if broker_started else [])
    started = _start_airflow(config, env, say)
    _wait_healthy(config, started, deadline)
    healthy_s = time.monotonic() - started_at
    say(f"Airflow healthy at {config.ui_url} after {healthy_s:.1f} s")
    try:
        seeded = seeding.finish(deadline - time.monotonic())
    except StatekeeperError as exc:
        raise PlatformError(str(exc)) from exc
    if seeded:
        say(f"seeded the input topics of {', '.join(seeded)} (logs {config.logs_dir}/seed-*)")

    client = airflow_api.AirflowClient(config.ui_url, config.admin_user, password)
    dags = _wait_for_dags(client, dag_files(config), deadline)
    wanted = sorted(d for d in dags if d.startswith(DAG_PREFIX))
    unpaused = []
    apps_runs_before = client.run_count(APPS_DAG) if APPS_DAG in dags else 0
    for dag_id in wanted:
        if dags[dag_id]["is_paused"]:
            client.unpause(dag_id)
            unpaused.append(dag_id)
    say(f"DAGs registered: {', '.join(wanted)} (unpaused now: {', '.join(unpaused) or 'none'})")

    notes = []
    apps_run = None
    if APPS_DAG in dags:
        before = apps_runs_before if APPS_DAG in unpaused else None
        if not _run_appears(client, APPS_DAG, before):
            apps_run = client.trigger(APPS_DAG)
            say(f"{APPS_DAG}: triggered {apps_run} (apps of {config.apps_specs_dir})")
        else:
            say(f"{APPS_DAG}: a run is already active")
    else:
        notes.append(f"no {APPS_DAG} DAG in {config.repo / 'dags'}: no app launched")
        say(notes[-1])
    apps = app_rows(config)
    if apps and apps_timeout_s > 0 and APPS_DAG in dags:
        names = ", ".join(a["application_id"] for a in apps)
        say(f"waiting up to {apps_timeout_s:.0f} s for the apps to run: {names}")
        apps = wait_for_apps(config, apps_timeout_s)
    bad = [a["application_id"] for a in apps if a["bad"]]
    return {
        "ui": config.ui_url,
        "state_stores": config.state_stores_url,
        "username": config.admin_user,
        "password": password,
        "bootstrap_servers": config.bootstrap_servers,
        "root": str(config.root),
        "started": [r.name for r in started] + ([BROKER] if broker_started else []),
        "seeded": seeded,
        "dags": wanted,
        "unpaused": unpaused,
        "apps_run": apps_run,
        "seconds": round(time.monotonic() - started_at, 1),
        "healthy_after_s": round(healthy_s, 1),
        "notes": notes,
        "apps": apps,
        "apps_bad": bad,
    }


# -- status --------------------------------------------------------------------------------


def status(config: PlatformConfig) -> dict[str, Any]:
    """Each service (pid, port, uptime, running), each app (named, its condition, pid,
    uptime, restarts), the apps' processes and Airflow's health; ``running`` is true only
    when every service runs, ``apps_bad`` names the apps that need an operator (FAILED,
    DOWN, ERROR)."""
    now = time.time()
    rows: list[dict[str, Any]] = []
    broker = embedded.broker_status(config.broker_run_dir)
    rows.append(
        {
            "service": BROKER,
            "running": bool(broker["running"]),
            "pid": broker.get("tansu_pid"),
            "port": broker.get("port"),
            "uptime_s": broker.get("uptime_s") if broker["running"] else None,
            "log": str(config.broker_run_dir / embedded.TANSU_LOG),
        }
    )
    service_pids: set[int] = {p for p in (broker.get("tansu_pid"), broker.get("s3_pid")) if p}
    for service in airflow_services(config):
        record = ProcessRecord.read(config.pid_file(service.name))
        alive = record is not None and record.alive()
        if record is not None:
            service_pids.add(record.pid)
        rows.append(
            {
                "service": service.name,
                "running": alive,
                "pid": record.pid if record else None,
                "port": service.port,
                "uptime_s": round(now - record.started_at, 1) if alive and record else None,
                "log": str(config.log_file(service.name)),
            }
        )
    apps = _spark_apps(config)
    running = all(r["running"] for r in rows)
    report = airflow_api.health(config.ui_url) if running else None
    app_list = app_rows(config)
    return {
        "running": running,
        "ui": config.ui_url,
        "username": config.admin_user,
        "password_file": str(config.airflow_home / PASSWORDS_FILE),
        "bootstrap_servers": config.bootstrap_servers,
        "root": str(config.root),
        "services": rows,
        "spark_apps": apps,
        "apps": app_list,
        "apps_bad": [a["application_id"] for a in app_list if a["bad"]],
        "health": report,
    }


def _spark_apps(config: PlatformConfig) -> list[int]:
    """The spark-submit JVMs among the platform's processes (the launched apps)."""
    return [
        pid
        for pid in processes_of(config.root)
        if "org.apache.spark.deploy.SparkSubmit" in _cmdline(pid)
    ]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


# -- down ----------------------------------------------------------------------------------


def stop_apps(config: PlatformConfig, spared: set[int], timeout_s: float) -> list[int]:
    """Stop the detached apps (group leaders carrying the marker, their parent not)
    gracefully: SIGTERM to the Python driver named by the app's status file when it is in
    the group (it finishes the batch and commits; spark-submit then exits), else to the
    leader; the group is killed after ``timeout_s``. Returns the groups' leaders."""
    marked = [p for p in processes_of(config.root) if p not in spared]
    # A launched app leads its own group and outlived the task that launched it; groups
    # whose parent is a platform process (Spark's Python workers) go down with their app.
    leaders = [p for p in marked if process_group(p) == p and parent_pid(p) not in marked]
    drivers, folders = {}, {}
    for status_file in config.root.glob("state/*/status.json"):
        with contextlib.suppress(OSError, ValueError, TypeError):
            pid = int(json.loads(status_file.read_text()).get("pid") or 0)
            if pid in marked:
                drivers[process_group(pid)] = pid
                folders[process_group(pid)] = status_file.parent
    # Written down before any signal: the supervisor relaunches these apps after the next
    # up, and does not count their exit as a crash.
    record_platform_stops(config, leaders, folders)
    for leader in leaders:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(drivers.get(leader, leader), signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(group_members(g) for g in leaders):
        time.sleep(0.2)
    for leader in leaders:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(leader, signal.SIGKILL)
    return leaders


def down(
    config: PlatformConfig,
    *,
    timeout_s: float = 20.0,
    app_timeout_s: float = 60.0,
    say: Say = _quiet,
) -> dict[str, Any]:
    """Stop every platform process: Airflow (scheduler first, so nothing is relaunched), the
    apps the DAGs launched (gracefully, up to ``app_timeout_s``) and any other descendant,
    then the broker. Returns what was stopped and what was still alive after (``left``,
    expected empty)."""
    stopped: list[dict[str, Any]] = []
    for service in reversed(airflow_services(config)):
        pid_file = config.pid_file(service.name)
        record = ProcessRecord.read(pid_file)
        if record is None:
            continue
        was_alive = record.alive()
        killed = stop_process(record, timeout_s)
        pid_file.unlink(missing_ok=True)
        if was_alive:
            stopped.append({"service": service.name, "pid": record.pid, "killed": killed})
            say(f"stopped {service.name} (pid {record.pid}){' with SIGKILL' if killed else ''}")

    broker = embedded.read_state(config.broker_run_dir)
    broker_pids = {p for p in ((broker.tansu_pid, broker.s3_pid) if broker else ()) if p}
    apps = stop_apps(config, broker_pids, app_timeout_s)
    if apps:
        stopped.append({"service": "apps", "pids": apps})
        say(f"stopped {len(apps)} app process group(s): {apps}")
    # Task runners and anything else still carrying the marker.
    others = [p for p in processes_of(config.root) if p not in broker_pids]
    if others:
        swept = stop_pids(others, timeout_s)
        stopped.append({"service": "other", "pids": others, "killed": swept})
        say(f"stopped {len(others)} more platform process(es): {others}")

    result = embedded.stop_broker(config.broker_run_dir, timeout_s)
    if result.get("was_running"):
        stopped.append({"service": BROKER, "pid": result.get("tansu_pid")})
        say(f"stopped the broker (pid {result.get('tansu_pid')})")

    left = sweep(config.root, timeout_s)
    if left:
        say(f"killed {len(left)} leftover process(es): {left}")
    left_after = processes_of(config.root)
    return {"stopped": stopped, "swept": left, "left": left_after, "root": str(config.root)}
