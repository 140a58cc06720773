"""Airflow plugin: the "State stores" page (a nav entry rendering inside the UI), its FastAPI
app with the JSON API and the drill reports, and the drill operator's "Drill report" link.
Wiring only: everything lives in statekeeper.airflow.plugin."""

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
