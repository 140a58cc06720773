"""A trigger that watches a launched app between health checks, off the worker slots.

Every ``check_interval_s`` it checks the process (pid + start time) and reads the app's
status (endpoint, else status file) in a thread, so the triggerer's event loop never
blocks, and feeds :class:`~statekeeper.airflow.supervision.policy.HealthMonitor`.

Modes:
- ``watch`` (the supervisor): fires ``{"healthy": False, "violations": [...]}`` as soon as a
  health rule is broken, or ``{"healthy": True, ...}`` after ``watch_period_s``;
- ``until_running`` (the sensor): fires ``{"healthy": True}`` once the app is RUNNING with
  batches advancing (or caught up), ``{"healthy": False}`` on a broken rule or after
  ``watch_period_s`` (the sensor's timeout).
Every event carries the last status summary.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from statekeeper.airflow.supervision.policy import (
    HealthMonitor,
    Observation,
    SupervisionConfig,
    batches_of,
    is_running_with_progress,
    pending_records,
)
from statekeeper.airflow.supervision.probe import observe
from statekeeper.airflow.supervision.process import AppProcessIdentity

MODES = ("watch", "until_running")


def status_summary(obs: Observation | None) -> dict[str, Any]:
    """The few status fields an event, XCom and log line carry."""
    if obs is None:
        return {}
    status = obs.status or {}
    return {
        "state": status.get("state"),
        "batches": batches_of(status),
        "pending_records": pending_records(status),
        "status_source": obs.status_source,
        "status_url": status.get("status_url"),
        "driver_pid": status.get("pid"),
        "process": obs.process_detail,
        "checked_at": obs.at,
    }


class AppHealthTrigger(BaseTrigger):
    """Watch one launch of an app (see the module doc for ``mode``).

    ``identity`` (an AppProcessIdentity as JSON) enables the process checks; without it only
    the status is read (``status_file`` and ``launched_at`` are then required).
    """

    def __init__(
        self,
        *,
        application_id: str,
        status_file: str,
        launched_at: float,
        config: dict[str, Any],
        identity: dict[str, Any] | None = None,
        mode: str = "watch",
        min_batches: int = 1,
    ) -> None:
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"AppHealthTrigger mode {mode!r}: expected one of {MODES}")
        self.application_id = application_id
        self.status_file = status_file
        self.launched_at = float(launched_at)
        self.config = dict(config)
        self.identity = identity
        self.mode = mode
        self.min_batches = int(min_batches)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "application_id": self.application_id,
                "status_file": self.status_file,
                "launched_at": self.launched_at,
                "config": self.config,
                "identity": self.identity,
                "mode": self.mode,
                "min_batches": self.min_batches,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        cfg = SupervisionConfig(**self.config)
        identity = AppProcessIdentity.from_json(self.identity) if self.identity else None
        monitor = HealthMonitor(cfg, self.launched_at)
        started = time.monotonic()
        checks = 0
        first_batches: int | None = None
        obs: Observation | None = None
        while True:
            obs = await asyncio.to_thread(
                observe, self.status_file, self.launched_at, cfg.status_timeout_s, identity
            )
            checks += 1
            violations = monitor.observe(obs)
            summary = status_summary(obs)
            if violations:
                reasons = "; ".join(v.reason for v in violations)
                self.log.warning("%s unhealthy: %s", self.application_id, reasons)
                yield TriggerEvent(
                    self._event(False, checks, summary, [v.__dict__ for v in violations])
                )
                return
            if self.mode == "until_running":
                if first_batches is None and obs.status is not None:
                    first_batches = batches_of(obs.status)
                if is_running_with_progress(obs.status, first_batches, self.min_batches):
                    yield TriggerEvent(self._event(True, checks, summary))
                    return
            elapsed = time.monotonic() - started
            if elapsed >= cfg.watch_period_s:
                if self.mode == "watch":
                    yield TriggerEvent(self._event(True, checks, summary))
                else:
                    timeout = {
                        "kind": "timeout",
                        "reason": f"not RUNNING with batches advancing after {elapsed:.0f}s",
                    }
                    yield TriggerEvent(self._event(False, checks, summary, [timeout]))
                return
            self.log.info(
                "%s check %d: %s", self.application_id, checks, summary.get("state") or "no status"
            )
            await asyncio.sleep(min(cfg.check_interval_s, max(0.0, cfg.watch_period_s - elapsed)))

    def _event(
        self,
        healthy: bool,
        checks: int,
        summary: dict[str, Any],
        violations: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        return {
            "application_id": self.application_id,
            "launched_at": self.launched_at,
            "healthy": healthy,
            "checks": checks,
            "status": summary,
            "violations": violations or [],
        }
