"""The Airflow plugin class: the "State stores" page (a nav entry rendering inside the UI),
its FastAPI app with the JSON API and the drill reports, and the drill operator's "Drill
report" link.

An installed statekeeper registers it through its ``airflow.plugins`` entry point (and
lists it in its provider info); ``plugins/statekeeper_plugin.py`` is the repo's shim.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from statekeeper.airflow.plugin.links import DrillReportLink
from statekeeper.airflow.plugin.web_app import EXTERNAL_VIEW, fastapi_app_entry


class StatekeeperPlugin(AirflowPlugin):
    """Registers the State stores app at /statekeeper and its nav entry."""

    name = "statekeeper"
    fastapi_apps = [fastapi_app_entry()]
    external_views = [EXTERNAL_VIEW]
    operator_extra_links = [DrillReportLink()]
