"""The State stores overview: everything an operator wants to see about each app, as JSON.

Pure data gathering from the files and endpoints the apps and the operations already write
(no Spark, no Great Expectations, no Airflow): the app's status (its status endpoint, else
its status file: state, lag, last batch), its tasks and stores (sizes on disk, where each
store's state came from), its snapshots (age, size), its drill history (RTO, RPO, pass/fail,
report and Data Docs files) and its audit verdicts. The Airflow plugin
(:mod:`statekeeper.airflow.plugin`) serves it; nothing here depends on that.
"""

from statekeeper.ops.overview.app_status import AppStatus, read_app_status
from statekeeper.ops.overview.overview import app_overview, drill_report_dir, gather_overview

__all__ = ["AppStatus", "app_overview", "drill_report_dir", "gather_overview", "read_app_status"]
