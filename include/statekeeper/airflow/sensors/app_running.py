"""Wait until an app reports RUNNING with batches advancing (deferred: no worker slot)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowException

from statekeeper.airflow.hooks.app import StatekeeperAppHook


class StatekeeperAppRunningSensor(BaseSensorOperator):
    """Succeeds once the app of ``spec_path`` reports RUNNING and completed ``min_batches``
    more micro-batches since the wait began (or has nothing pending: an idle app runs no
    batch). Reads the app's status (endpoint, else status file) every ``poke_interval``
    seconds in :class:`AppHealthTrigger`; fails when the app reports ERROR, or after
    ``timeout`` seconds. Only a status written after ``since`` (epoch seconds; default: now
    minus ``timeout``) counts, so a previous run's leftover file does not satisfy it.
    """

    template_fields: Sequence[str] = ("spec_path", "settings_overrides")

    def __init__(
        self,
        *,
        spec_path: str,
        settings_overrides: dict[str, Any] | None = None,
        min_batches: int = 1,
        since: float | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", 5.0)
        kwargs.setdefault("timeout", 600.0)
        super().__init__(**kwargs)
        self.spec_path = spec_path
        self.settings_overrides = dict(settings_overrides or {})
        self.min_batches = min_batches
        self.since = since

    def execute(self, context: Any) -> None:
        from statekeeper.airflow.triggers.app_health import AppHealthTrigger

        hook = StatekeeperAppHook(self.spec_path, self.settings_overrides)
        timeout = float(self.timeout)
        # The trigger's health rules: only the process-free ones apply (no pid here); the
        # start-up limit is the sensor's timeout.
        config = {
            "check_interval_s": float(self.poke_interval),
            "watch_period_s": max(timeout, float(self.poke_interval)),
            "startup_timeout_s": timeout,
            "heartbeat_timeout_s": max(timeout, 60.0),
            "stall_timeout_s": max(timeout, 60.0),
            "lag_growth_checks": 0,
        }
        self.defer(
            trigger=AppHealthTrigger(
                application_id=hook.application_id,
                status_file=str(hook.settings.status_path().absolute()),
                launched_at=self.since if self.since is not None else time.time() - timeout,
                config=config,
                mode="until_running",
                min_batches=self.min_batches,
            ),
            method_name="execute_complete",
        )

    def execute_complete(self, context: Any, event: dict[str, Any] | None = None) -> dict:
        event = event or {}
        if not event.get("healthy"):
            reasons = "; ".join(v["reason"] for v in event.get("violations", [])) or "no event"
            raise AirflowException(f"{event.get('application_id')} is not running: {reasons}")
        self.log.info("%s is RUNNING: %s", event.get("application_id"), event.get("status"))
        return dict(event.get("status") or {})
