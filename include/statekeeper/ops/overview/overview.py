"""Assemble the overview of each app from its spec (see the package docstring).

Each section is gathered on its own: a section that fails (an unreachable snapshot store, a
corrupt history) is reported in the app's ``errors`` with the reason, and the others still
show.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from statekeeper.app.spec import load_app_spec
from statekeeper.errors import ConfigError
from statekeeper.ops.overview.app_status import read_app_status
from statekeeper.ops.overview.app_version import app_version
from statekeeper.ops.overview.histories import audit_rows, drill_rows, report_dir_of
from statekeeper.ops.overview.snapshot_rows import snapshot_summary
from statekeeper.ops.overview.task_stores import task_rows
from statekeeper.settings import StatekeeperSettings


def gather_overview(spec_paths: Iterable[str | Path], status_timeout_s: float = 1.0) -> dict:
    """``{"generated_at": epoch s, "apps": [app overview, ...]}`` for the app specs given
    (e.g. the specs :func:`statekeeper.airflow.specs.discover_apps` finds), in that order."""
    apps = [app_overview(path, status_timeout_s) for path in spec_paths]
    return {"generated_at": time.time(), "apps": apps}


def app_overview(spec_path: str | Path, status_timeout_s: float = 1.0) -> dict[str, Any]:
    """The overview of the app of one spec: status, tasks and stores, snapshots, drills,
    audits, its version (fingerprint, active or superseded, cut-overs and rollbacks);
    ``errors`` maps a section that could not be read to why."""
    errors: dict[str, str] = {}
    try:
        spec = load_app_spec(spec_path)
        settings = spec.resolved_settings()
    except Exception as exc:  # a broken spec is one broken row, not a broken page
        return {
            "application_id": Path(spec_path).stem,
            "spec_path": str(spec_path),
            "errors": {"spec": f"{type(exc).__name__}: {exc}"},
        }
    app = settings.application_id
    state_dir = Path(settings.state_dir)
    status = read_app_status(settings, status_timeout_s)
    doc = status.document
    tasks = _section(errors, "tasks", lambda: task_rows(state_dir, app, doc), [])
    lags = [t["source_lag"] for t in tasks if t["source_lag"] is not None]
    return {
        "application_id": app,
        "spec_path": str(spec_path),
        "state_dir": str(state_dir.resolve()),
        "running": status.running,
        "state": doc.get("state"),
        "status_note": status.note,
        "status_source": status.source,
        "status_url": status.status_url,
        "status_file": status.status_file,
        "status_updated_at": doc.get("updated_at"),
        "started_at": doc.get("started_at"),
        "pid": doc.get("pid"),
        "error": doc.get("error"),
        "lag": sum(lags) if lags else None,
        "last_batch": doc.get("last_batch"),
        "throughput": doc.get("throughput"),
        "tasks": tasks,
        "snapshots": _section(errors, "snapshots", lambda: snapshot_summary(settings), None),
        "drills": _section(errors, "drills", lambda: drill_rows(state_dir, app), []),
        "audits": _section(errors, "audits", lambda: audit_rows(state_dir, app), []),
        "version": _section(
            errors, "version", lambda: app_version(state_dir, app, spec.enabled), None
        ),
        "errors": errors,
    }


def spec_of(spec_paths: Iterable[str | Path], application_id: str) -> str | Path:
    """The spec among ``spec_paths`` of app ``application_id``; ConfigError if none is."""
    for path in spec_paths:
        if load_app_spec(path).application_id == application_id:
            return path
    raise ConfigError(f"no app spec with application id {application_id!r}")


def drill_report_dir(spec_paths: Iterable[str | Path], application_id: str, drill_id: str) -> Path:
    """The report directory of drill ``drill_id`` of app ``application_id`` (one of the apps
    of ``spec_paths``), as the drill history records it. Raises ConfigError naming what is
    unknown."""
    settings: StatekeeperSettings = load_app_spec(
        spec_of(spec_paths, application_id)
    ).resolved_settings()
    found = report_dir_of(Path(settings.state_dir), settings.application_id, drill_id)
    if found is None:
        raise ConfigError(f"app {application_id} has no drill {drill_id!r} in its history")
    return found


def _section(errors: dict[str, str], name: str, read: Callable[[], Any], default: Any) -> Any:
    try:
        return read()
    except Exception as exc:  # shown on the page under the app's errors
        errors[name] = f"{type(exc).__name__}: {exc}"
        return default
