"""The apps a DAG drives: every app spec in one folder (``<folder>/*/*.yaml|yml|toml``), and
the Asset each app's snapshots publish.

A bad spec stays its own app's problem: :func:`discover` returns it apart
(:class:`InvalidSpec`, with the one-line reason), and each DAG gives it a placeholder task
that fails naming the spec and the reason (:func:`invalid_spec_task`), so the other apps'
tasks still exist."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow.sdk import Asset

from statekeeper.app.spec_discovery import (
    DEFAULT_SPECS_DIR,
    SPEC_SUFFIXES,
    SPECS_DIR_ENV,
    peek_application_id,
    spec_files,
    specs_dir,
)

__all__ = [
    "DEFAULT_SPECS_DIR",
    "SPECS_DIR_ENV",
    "SPEC_SUFFIXES",
    "AppTarget",
    "InvalidSpec",
    "discover",
    "discover_apps",
    "invalid_spec_task",
    "snapshot_asset",
    "specs_dir",
    "supervision_asset",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AppTarget:
    """One app a DAG acts on: its id and spec file."""

    application_id: str
    spec_path: str

    @property
    def snapshot_asset(self) -> Asset:
        """The Asset the app's snapshots update (an outlet of the snapshot task)."""
        return snapshot_asset(self.application_id)


def snapshot_asset(application_id: str) -> Asset:
    """``statekeeper://<app>/snapshots``: updated each time the app's snapshots are taken."""
    return Asset(
        name=f"statekeeper_{application_id}_snapshots",
        uri=f"statekeeper://{application_id}/snapshots",
        group="statekeeper",
    )


def supervision_asset(application_id: str) -> Asset:
    """``statekeeper://<app>/supervision``: the supervising task's inlet, whose asset state
    store holds the app's launch identity, restart history and FAILED mark across DAG runs
    (a task's own state store lasts one DAG run)."""
    return Asset(
        name=f"statekeeper_{application_id}_supervision",
        uri=f"statekeeper://{application_id}/supervision",
        group="statekeeper",
    )


@dataclass(frozen=True)
class InvalidSpec:
    """A spec file of the folder that does not load: its path, the one-line reason, and the
    name its placeholder tasks get (``<verb>_<name>``): its application id when the file
    declares one no valid spec has, else ``invalid_<folder>_<file>``."""

    spec_path: str
    reason: str
    name: str


def discover(folder: Path | None = None) -> tuple[list[AppTarget], list[InvalidSpec]]:
    """Every app spec one level below ``folder`` (default :func:`specs_dir`): the valid ones
    by app id, and the invalid ones (a spec that does not load, or a second spec of an app
    id) with their reason. Raises ConfigError only when the folder does not exist."""
    from statekeeper.app.spec import load_app_spec
    from statekeeper.errors import ConfigError

    folder = folder or specs_dir()
    if not folder.is_dir():
        raise ConfigError(f"app specs folder {folder} does not exist (set {SPECS_DIR_ENV})")
    found: dict[str, AppTarget] = {}
    bad: list[tuple[Path, str]] = []
    for path in spec_files(folder):
        try:
            app_id = load_app_spec(path).application_id
        except ConfigError as exc:
            bad.append((path, _one_line(str(exc))))
            continue
        if app_id in found:
            bad.append(
                (path, f"app id {app_id!r} is in two specs: {found[app_id].spec_path} and {path}")
            )
            continue
        found[app_id] = AppTarget(app_id, str(path))
    invalid = []
    taken = set(found)
    for path, reason in bad:
        name = peek_application_id(path)
        if name is None or name in taken or not re.fullmatch(r"[A-Za-z0-9._-]+", name):
            name = re.sub(r"[^A-Za-z0-9_-]", "_", f"invalid_{path.parent.name}_{path.name}")
        taken.add(name)
        log.warning("app spec %s is invalid, its tasks fail: %s", path, reason)
        invalid.append(InvalidSpec(str(path), reason, name))
    return list(found.values()), invalid


def discover_apps(folder: Path | None = None) -> list[AppTarget]:
    """Every valid app spec one level below ``folder`` (default :func:`specs_dir`), by app id.

    Strict: raises ConfigError naming the file for an invalid spec and for two specs of one
    app id (the DAGs use :func:`discover`, which keeps a bad spec to its own app).
    """
    from statekeeper.errors import ConfigError

    apps, invalid = discover(folder)
    if invalid:
        raise ConfigError(f"app spec {invalid[0].spec_path}: {invalid[0].reason}")
    return apps


def invalid_spec_task(task_id: str, spec: InvalidSpec) -> Any:
    """The placeholder task of an invalid spec in a DAG: it fails naming the spec and the
    reason (so the grid shows it), and the other apps' tasks run as usual."""
    from statekeeper.airflow.operators.invalid_spec import InvalidSpecOperator

    return InvalidSpecOperator(task_id=task_id, spec_path=spec.spec_path, reason=spec.reason)


def _one_line(text: str) -> str:
    return "; ".join(part.strip() for part in text.splitlines() if part.strip())
