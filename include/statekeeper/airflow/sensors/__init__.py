"""Sensors: wait for an app's state (``app_running``), deferred to the app health trigger."""

from statekeeper.airflow.sensors.app_running import StatekeeperAppRunningSensor

__all__ = ["StatekeeperAppRunningSensor"]
