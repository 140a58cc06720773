"""Supervision of detached streaming apps: health rules and restart policy (``policy``,
pure), the launched process's identity and stop (``process``), one health check
(``probe``), intended stops that are no crash (``stops``), the record's copy and summary
for people (``summary``). None of these import Airflow: the hook, trigger, operator and
sensor of ``statekeeper.airflow`` and the platform call them. ``operator`` is the
supervising step the DAGs run (Airflow; import it explicitly)."""

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
