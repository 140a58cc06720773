"""Operators: snapshot, drill and audit one app, each a thin caller of statekeeper.ops; keep
one app running (the supervisor's reconcile step)."""

from statekeeper.airflow.operators.audit import StatekeeperAuditOperator
from statekeeper.airflow.operators.drill import StatekeeperDrillOperator
from statekeeper.airflow.operators.snapshot import StatekeeperSnapshotOperator
from statekeeper.airflow.operators.supervisor import StatekeeperAppSupervisorOperator

__all__ = [
    "StatekeeperAppSupervisorOperator",
    "StatekeeperAuditOperator",
    "StatekeeperDrillOperator",
    "StatekeeperSnapshotOperator",
]
