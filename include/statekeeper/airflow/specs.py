"""The apps a DAG drives: every app spec in one folder (``<folder>/*/*.yaml|yml|toml``), and
the Asset each app's snapshots publish."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from airflow.sdk import Asset

SPECS_DIR_ENV = "STATEKEEPER_SPECS_DIR"
# The repo's shipped apps, for a DAG folder that is the repo's dags/.
DEFAULT_SPECS_DIR = Path(__file__).resolve().parents[3] / "spark_apps"
SPEC_SUFFIXES = (".yaml", ".yml", ".toml")


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


def specs_dir() -> Path:
    """The folder of app specs: ``$STATEKEEPER_SPECS_DIR``, else the repo's spark_apps/."""
    return Path(os.environ.get(SPECS_DIR_ENV) or DEFAULT_SPECS_DIR)


def discover_apps(folder: Path | None = None) -> list[AppTarget]:
    """Every app spec one level below ``folder`` (default :func:`specs_dir`), by app id.

    Raises ConfigError naming the file for an invalid spec and for two specs of one app id.
    """
    from statekeeper.app.spec import load_app_spec
    from statekeeper.errors import ConfigError

    folder = folder or specs_dir()
    if not folder.is_dir():
        raise ConfigError(f"app specs folder {folder} does not exist (set {SPECS_DIR_ENV})")
    found: dict[str, AppTarget] = {}
    for path in sorted(p for p in folder.glob("*/*") if p.suffix in SPEC_SUFFIXES):
        app_id = load_app_spec(path).application_id
        if app_id in found:
            raise ConfigError(
                f"app id {app_id!r} is in two specs: {found[app_id].spec_path} and {path}"
            )
        found[app_id] = AppTarget(app_id, str(path))
    return list(found.values())
