"""What the statekeeper operators share: the app spec and settings overrides they act on."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from statekeeper.airflow.hooks.app import StatekeeperAppHook


class StatekeeperAppOperator(BaseOperator):
    """An operator on the app of ``spec_path`` (a .yaml/.toml app spec) with
    ``settings_overrides`` (StatekeeperSettings fields, e.g. ``snapshot_url``); both are
    templated."""

    template_fields: Sequence[str] = ("spec_path", "settings_overrides")

    def __init__(
        self,
        *,
        spec_path: str,
        settings_overrides: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.settings_overrides = dict(settings_overrides or {})

    def app_hook(self) -> StatekeeperAppHook:
        """A hook to the app, built from the rendered fields."""
        return StatekeeperAppHook(self.spec_path, self.settings_overrides)
