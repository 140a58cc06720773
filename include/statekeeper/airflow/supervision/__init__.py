"""Supervision of detached streaming apps: health rules and restart policy (``policy``,
pure), the launched process's identity and stop (``process``), one health check
(``probe``). None of it imports Airflow: the hook, trigger, operator and sensor of
``statekeeper.airflow`` call it."""

from statekeeper.airflow.supervision.policy import (
    HealthMonitor,
    Observation,
    RestartDecision,
    SupervisionConfig,
    SupervisionRecord,
    Violation,
    backoff_s,
    decide_restart,
    supervision_config,
)

__all__ = [
    "HealthMonitor",
    "Observation",
    "RestartDecision",
    "SupervisionConfig",
    "SupervisionRecord",
    "Violation",
    "backoff_s",
    "decide_restart",
    "supervision_config",
]
