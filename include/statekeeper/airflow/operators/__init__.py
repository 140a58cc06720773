"""Operators: snapshot, drill and audit one app, each a thin caller of statekeeper.ops, and
cut over or roll back between two versions (statekeeper.upgrade). The supervising step
(keep one app running) is statekeeper.airflow.supervision.operator."""

from statekeeper.airflow.operators.audit import StatekeeperAuditOperator
from statekeeper.airflow.operators.drill import StatekeeperDrillOperator
from statekeeper.airflow.operators.snapshot import StatekeeperSnapshotOperator
from statekeeper.airflow.operators.upgrade import StatekeeperUpgradeOperator

__all__ = [
    "StatekeeperAuditOperator",
    "StatekeeperDrillOperator",
    "StatekeeperSnapshotOperator",
    "StatekeeperUpgradeOperator",
]
