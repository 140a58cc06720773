"""Triggers: wait on a launched app without holding a worker slot (``app_health``)."""

from statekeeper.airflow.triggers.app_health import AppHealthTrigger

__all__ = ["AppHealthTrigger"]
