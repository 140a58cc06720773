"""What supervision knows about an app, for people: a copy of the supervision record beside
the app's status file, and the summary the State stores page, ``statekeeper platform
status`` and ``statekeeper platform up`` show (state, restarts in the window with the last
reason and time, uptime, FAILED with its remedy).

The record itself lives in Airflow (the asset state store of the app's supervision Asset);
the supervisor writes this copy (``<state_dir>/<app>/supervision.json``) each time it saves
the record, so readers need no Airflow metadata database. No Airflow here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from statekeeper.airflow.supervision.policy import SupervisionConfig, SupervisionRecord
from statekeeper.atomic_file import replace_text

#: The copy of the supervision record, beside the app's status file.
SUPERVISION_FILE = "supervision.json"
#: The DAG whose runs act at once (not queued behind the supervising DAG's watch).
ACTIONS_DAG = "statekeeper_app_actions"

#: Conditions of an app, as ``platform status`` and the page name them.
RUNNING_STATES = ("RUNNING",)
STARTING_STATES = ("CREATED", "REBALANCING", "RESTORING")
#: Conditions that make ``platform status`` / ``platform up`` exit non-zero.
BAD_CONDITIONS = ("FAILED", "DOWN", "ERROR")


def remedy(application_id: str) -> str:
    """What an operator does about a FAILED app."""
    return (
        f"read the last failure's reason and the app's log, fix the cause, then trigger the "
        f"{ACTIONS_DAG} DAG with action=restart and apps=[{application_id!r}] (or redeploy); "
        f"until then the supervisor does not relaunch it"
    )


def supervision_file(app_dir: str | Path) -> Path:
    """The copy of the supervision record of the app whose status file is in ``app_dir``."""
    return Path(app_dir) / SUPERVISION_FILE


def write_supervision_file(
    app_dir: str | Path, record: SupervisionRecord, config: SupervisionConfig
) -> None:
    """Write the copy (atomically), with the window and limit the counts are judged by."""
    path = supervision_file(app_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        **record.to_json(),
        "written_at": time.time(),
        "restart_window_s": config.restart_window_s,
        "max_restarts": config.max_restarts,
    }
    replace_text(path, json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")


def read_supervision_file(app_dir: str | Path) -> dict[str, Any] | None:
    """The copy, or None when there is none (never supervised) or it is unreadable."""
    try:
        doc = json.loads(supervision_file(app_dir).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _within(entries: Any, now: float, window_s: float) -> list[Mapping[str, Any]]:
    return [
        e for e in (entries or []) if isinstance(e, Mapping) and now - float(e["at"]) <= window_s
    ]


def summarize(
    application_id: str,
    supervision: Mapping[str, Any] | None,
    status: Mapping[str, Any] | None,
    *,
    process_alive: bool | None,
    now: float | None = None,
) -> dict[str, Any]:
    """One app's supervision summary.

    ``supervision``: the copy (:func:`read_supervision_file`); ``status``: the app's status
    document; ``process_alive``: whether the recorded launch runs (None: unknown).
    ``condition`` is one word: FAILED (not relaunched until an operator restarts it),
    STOPPED (by an operator), the app's state (RUNNING, REBALANCING, RESTORING, ...) while
    its process runs, LAUNCHING (running, no status yet), DOWN (its process is gone and it
    is not meant to be), ERROR, or NOT SUPERVISED (no record yet).
    """
    now = time.time() if now is None else now
    sup = dict(supervision or {})
    window = float(sup.get("restart_window_s") or SupervisionConfig().restart_window_s)
    restarts = _within(sup.get("restarts"), now, window)
    relaunches = _within(sup.get("relaunches"), now, window)
    identity = sup.get("identity") or {}
    launched_at = identity.get("launched_at")
    state = (status or {}).get("state")
    started = (status or {}).get("started_at")
    if launched_at is not None and started is not None and float(started) < float(launched_at) - 1:
        state = None  # the status of an earlier launch
    failed = sup.get("failed")
    if failed:
        condition = "FAILED"
    elif sup.get("stopped"):
        condition = "STOPPED"
    elif process_alive is False or (identity == {} and supervision is not None):
        condition = "DOWN"
    elif state == "ERROR":
        condition = "ERROR"
    elif state:
        condition = str(state)
    elif process_alive:
        condition = "LAUNCHING"
    else:
        condition = "NOT SUPERVISED" if supervision is None else "DOWN"
    last = restarts[-1] if restarts else None
    summary: dict[str, Any] = {
        "application_id": application_id,
        "condition": condition,
        "state": state,
        "pid": identity.get("pid"),
        "launched_at": launched_at,
        "uptime_s": round(now - float(launched_at), 1)
        if launched_at is not None and process_alive is not False and not failed
        else None,
        "restarts_in_window": len(restarts),
        "restart_window_s": window,
        "max_restarts": sup.get("max_restarts"),
        "last_restart": (
            {"at": last.get("at"), "reason": last.get("reason"), "kinds": last.get("kinds")}
            if last
            else None
        ),
        "relaunches_in_window": len(relaunches),
        "last_relaunch": relaunches[-1] if relaunches else None,
        "failed": None,
        "stopped": sup.get("stopped"),
    }
    if failed:
        summary["failed"] = {
            "at": failed.get("at"),
            "reasons": failed.get("reasons"),
            "explanation": failed.get("explanation"),
            "remedy": remedy(application_id),
        }
    return summary


def is_bad(summary: Mapping[str, Any]) -> bool:
    """Whether the app needs an operator (FAILED, down while it should run, ERROR)."""
    return summary.get("condition") in BAD_CONDITIONS
