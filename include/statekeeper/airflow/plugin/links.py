"""The drill operator's "Drill report" extra link: the report of that task's drill.

Airflow 3 computes extra links on the worker when the task finishes (passed or failed) and
keeps the URL in XCom; the drill operator pushes its drill's app and id (:data:`XCOM_KEY`)
before it passes or fails, and this link turns them into the page's report route.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

#: Where the State stores app is mounted in the Airflow api-server.
URL_PREFIX = "/statekeeper"
#: XCom key under which the drill operator pushes ``{"app": ..., "drill_id": ...}``.
XCOM_KEY = "statekeeper_drill"


def drill_report_path(app: str, drill_id: str, file: str = "report.html") -> str:
    """The page's route of one file of a drill's report directory."""
    return f"{URL_PREFIX}/drills/{quote(app, safe='')}/{quote(drill_id, safe='')}/{file}"


class DrillReportLink(BaseOperatorLink):
    """ "Drill report" on a drill task: its report.html, served by the State stores app."""

    name = "Drill report"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        from airflow.sdk.execution_time.xcom import XCom

        drill = XCom.get_value(ti_key=ti_key, key=XCOM_KEY)
        if not isinstance(drill, dict) or not drill.get("drill_id"):
            return ""  # the drill did not get as far as a record
        return _base_url() + drill_report_path(drill["app"], drill["drill_id"])


def _base_url() -> str:
    """Airflow's ``[api] base_url`` without its trailing slash ("" when unset: a path link)."""
    from airflow.sdk.configuration import conf

    return (conf.get("api", "base_url", fallback="") or "").rstrip("/")
