"""The platform's apps as ``up`` and ``status`` show them: one row per app spec of the specs
folder, named, with its condition (RUNNING, REBALANCING, FAILED, DOWN, ...), pid, uptime and
restarts, from the app's status file, the supervision record's copy beside it and /proc.

Also what ``down`` writes before it signals an app (an intended stop, so the supervisor
relaunches the app afterwards without counting a crash), and what a fresh broker's clean-up
keeps of the apps' folders (those records). No Airflow, no Spark.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from statekeeper.airflow.supervision.process import AppProcessIdentity
from statekeeper.airflow.supervision.stops import RELAUNCH, STOP_FILE, record_intended_stop
from statekeeper.airflow.supervision.summary import (
    SUPERVISION_FILE,
    is_bad,
    read_supervision_file,
    summarize,
)
from statekeeper.platform.layout import PlatformConfig
from statekeeper.procfs import start_ticks

SPEC_SUFFIXES = (".yaml", ".yml", ".toml")
#: What a fresh broker's clean-up keeps in each app's folder: supervision's own records.
KEPT_FILES = (STOP_FILE, SUPERVISION_FILE)
#: The spark-submit ``--name`` the supervisor's launches carry (``statekeeper-<app id>``).
NAME_PREFIX = "statekeeper-"


def app_specs(config: PlatformConfig) -> list[tuple[str, Path, Any]]:
    """``(app id, spec path, spec)`` of every spec one level below the specs folder, as the
    DAGs discover them; a spec that does not load is skipped (the DAGs report it)."""
    from statekeeper.app.spec import load_app_spec
    from statekeeper.errors import ConfigError

    folder = config.apps_specs_dir
    found: dict[str, tuple[str, Path, Any]] = {}
    for path in sorted(p for p in folder.glob("*/*") if p.suffix in SPEC_SUFFIXES):
        with contextlib.suppress(ConfigError, OSError, ValueError):
            spec = load_app_spec(path)
            found.setdefault(spec.application_id, (spec.application_id, path, spec))
    return list(found.values())


def app_dir(config: PlatformConfig, application_id: str, spec: Any = None) -> Path:
    """Where the app's status file (and supervision's records) are: the spec's
    ``status_file`` folder, else ``<root>/state/<app>`` (the platform sets the state dir)."""
    custom = (getattr(spec, "settings", None) or {}).get("status_file")
    if custom:
        return Path(custom).parent
    return config.app_data_dirs[0] / application_id


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def app_rows(config: PlatformConfig, now: float | None = None) -> list[dict[str, Any]]:
    """One summary per app spec (see :func:`~statekeeper.airflow.supervision.summary.
    summarize`), plus ``enabled``, ``bad`` (needs an operator: FAILED, DOWN, ERROR) and
    ``status_file``. A disabled app that does not run is DISABLED, not DOWN."""
    rows = []
    for application_id, _path, spec in app_specs(config):
        folder = app_dir(config, application_id, spec)
        supervision = read_supervision_file(folder)
        status = _read_json(folder / "status.json")
        alive: bool | None = None
        identity = (supervision or {}).get("identity")
        if identity:
            launch = AppProcessIdentity.from_json(identity)
            alive = launch.alive()[0]
            if alive is None and launch.host == socket.gethostname():
                alive = False  # launched here before the machine restarted: gone
        elif supervision is not None:
            alive = False
        row = summarize(application_id, supervision, status, process_alive=alive, now=now)
        enabled = bool(getattr(spec, "enabled", True))
        if not enabled and row["condition"] in ("DOWN", "NOT SUPERVISED", "STOPPED"):
            row["condition"] = "DISABLED"
        row.update(enabled=enabled, status_file=str(folder / "status.json"))
        row["bad"] = enabled and is_bad(row)
        rows.append(row)
    return rows


#: Conditions ``up`` waits through: the app is being (re)launched.
UNSETTLED = ("DOWN", "LAUNCHING", "NOT SUPERVISED")


def settled(row: dict[str, Any]) -> bool:
    """Whether ``up`` can stop waiting for this app: it runs with its status published (any
    state), or it is FAILED, STOPPED, DISABLED or in ERROR."""
    return row["condition"] not in UNSETTLED


def wait_for_apps(
    config: PlatformConfig, timeout_s: float, poll_s: float = 1.0
) -> list[dict[str, Any]]:
    """The app rows once every app settled (:func:`settled`) or ``timeout_s`` passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = app_rows(config)
        if all(settled(row) for row in rows) or time.monotonic() >= deadline:
            return rows
        time.sleep(poll_s)


# -- down ----------------------------------------------------------------------------------


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def launched_app_id(pid: int) -> str | None:
    """The app id of a spark-submit the supervisor launched (its ``--name statekeeper-<id>``)."""
    argv = _cmdline(pid)
    for flag, value in zip(argv, argv[1:], strict=False):
        if flag == "--name" and value.startswith(NAME_PREFIX):
            return value[len(NAME_PREFIX) :]
    return None


def record_platform_stops(
    config: PlatformConfig, leaders: list[int], known_dirs: dict[int, Path]
) -> dict[int, str]:
    """Before ``down`` signals the apps: an intended stop (``by: platform down``, ``then:
    relaunch``) for each app group leader, in its app's folder (``known_dirs`` from the
    status files, else from the launch's ``--name``). Returns the folders written, by
    leader; leaders that are no supervised launch are left out."""
    written: dict[int, str] = {}
    specs = {app_id: spec for app_id, _path, spec in app_specs(config)}
    for leader in leaders:
        folder = known_dirs.get(leader)
        if folder is None:
            app_id = launched_app_id(leader)
            if app_id is None:
                continue
            folder = app_dir(config, app_id, specs.get(app_id))
        ticks = start_ticks(leader)
        if ticks is None:
            continue
        with contextlib.suppress(OSError):
            record_intended_stop(folder, leader, ticks, by="platform down", then=RELAUNCH)
            written[leader] = str(folder)
    return written


def wipe_app_data(folder: Path) -> None:
    """Remove an app data folder (state, checkpoints, snapshots) of a previous broker, but
    keep supervision's records in each app's folder: the next supervising step reads them
    (an intended stop is not a crash; restarts and FAILED marks stay)."""
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        keep = [entry / name for name in KEPT_FILES] if entry.is_dir() else []
        if not any(k.exists() for k in keep):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
            continue
        for child in entry.iterdir():
            if child.name in KEPT_FILES:
                continue
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
