"""What an operation acts on: an app spec with its resolved settings.

The ``statekeeper`` CLI and the Airflow operators both start from a spec file plus a few
setting overrides; this is the one place that turns them into settings (their snapshot
storage: :func:`statekeeper.snapshots.storage_for`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statekeeper.app.spec import AppSpec, load_app_spec
from statekeeper.settings import StatekeeperSettings


def spec_app(spec_file: str | Path, **overrides: Any) -> tuple[StatekeeperSettings, AppSpec]:
    """(settings, app spec) from an app spec file, with ``overrides`` applied to its settings."""
    spec = load_app_spec(spec_file)
    return spec.resolved_settings(**overrides), spec
