"""A hook to one statekeeper app: its spec, resolved settings, topology and snapshot storage."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook


class StatekeeperAppHook(BaseHook):
    """The app of ``spec_path`` with ``settings_overrides`` applied (they win over the spec
    and the environment, as command-line flags do)."""

    def __init__(self, spec_path: str, settings_overrides: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.spec_path = spec_path
        self.settings_overrides = dict(settings_overrides or {})

    @cached_property
    def _target(self) -> tuple[Any, Any]:
        from statekeeper.ops.targets import spec_app

        return spec_app(self.spec_path, **self.settings_overrides)

    @property
    def settings(self) -> Any:
        """The app's resolved StatekeeperSettings."""
        return self._target[0]

    @property
    def spec(self) -> Any:
        """The app's AppSpec."""
        return self._target[1]

    @property
    def application_id(self) -> str:
        """The app's id, from its resolved settings."""
        return str(self.settings.application_id)

    def topology(self) -> Any:
        """The app's topology (imports the topology module)."""
        return self.spec.build_topology()

    def snapshot_storage(self, create: bool = False) -> Any:
        """The app's SnapshotStorage; ``create`` makes its root where missing."""
        from statekeeper.snapshots import storage_for

        return storage_for(self.settings, create=create)

    def get_conn(self) -> Any:
        """Airflow's hook interface: the connection here is the app's settings."""
        return self.settings
