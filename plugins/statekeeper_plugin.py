"""The repo's plugins folder shim for the State stores plugin (make up, the tests); the class
lives in the package: :class:`statekeeper.airflow.plugin.airflow_plugin.StatekeeperPlugin`.

An installed statekeeper (``make install``'s editable one too) registers that class through
its ``airflow.plugins`` entry point. Airflow loads the plugins folder first, then entry
points, and keeps one plugin per name: the API server logs the second "statekeeper" as
"already registered" and lists it among the plugin import errors, and the task SDK's loader
stops registering that source's remaining plugins. So this file binds the class (the
loader registers every AirflowPlugin subclass it finds here) only when no entry point
provides it, e.g. with statekeeper on ``PYTHONPATH`` but not installed.
"""

from __future__ import annotations

from importlib.metadata import entry_points

_MODULE = "statekeeper.airflow.plugin.airflow_plugin"

if not any(ep.module == _MODULE for ep in entry_points(group="airflow.plugins")):
    from statekeeper.airflow.plugin.airflow_plugin import StatekeeperPlugin

    __all__ = ["StatekeeperPlugin"]
