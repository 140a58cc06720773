"""Operators: snapshot, drill and audit one app, each a thin caller of statekeeper.ops. The
supervising step (keep one app running) is statekeeper.airflow.supervision.operator."""

from statekeeper.airflow.operators.audit import StatekeeperAuditOperator
from statekeeper.airflow.operators.drill import StatekeeperDrillOperator
from statekeeper.airflow.operators.snapshot import StatekeeperSnapshotOperator

__all__ = [
    "StatekeeperAuditOperator",
    "StatekeeperDrillOperator",
    "StatekeeperSnapshotOperator",
]
