"""What an operation acts on: an app spec with its resolved settings, and its snapshot storage.

The ``statekeeper`` CLI and the Airflow operators both start from a spec file plus a few
setting overrides; this is the one place that turns them into settings and storage.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statekeeper.app.spec import AppSpec, load_app_spec
from statekeeper.settings import StatekeeperSettings
from statekeeper.snapshots import SnapshotStorage, snapshot_url_for


def spec_app(spec_file: str | Path, **overrides: Any) -> tuple[StatekeeperSettings, AppSpec]:
    """(settings, app spec) from an app spec file, with ``overrides`` applied to its settings."""
    spec = load_app_spec(spec_file)
    return spec.resolved_settings(**overrides), spec


def snapshot_storage(settings: StatekeeperSettings, create: bool = False) -> SnapshotStorage:
    """The app's snapshot storage (``settings.snapshot_url``, else the default under the state
    root); ``create`` makes the root where it does not exist yet."""
    return SnapshotStorage(
        snapshot_url_for(settings),
        settings.application_id,
        create=create,
        s3_endpoint=settings.snapshot_s3_endpoint,
    )
