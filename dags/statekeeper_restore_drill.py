"""Daily, and whenever an app's snapshots are updated: restore drill of every app.

A failed drill fails its task; the record, report.html and Data Docs path are in the log
and the task's return value. Wiring only: the work is in statekeeper.airflow.operators.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, AssetAny, AssetOrTimeSchedule, CronTriggerTimetable, Param

from statekeeper.airflow.operators import StatekeeperDrillOperator
from statekeeper.airflow.specs import discover, invalid_spec_task

apps, invalid = discover()
daily = CronTriggerTimetable("@daily", timezone="UTC")

with DAG(
    dag_id="statekeeper_restore_drill",
    schedule=(
        AssetOrTimeSchedule(timetable=daily, assets=AssetAny(*(a.snapshot_asset for a in apps)))
        if apps
        else daily
    ),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["statekeeper"],
    params={
        "from_snapshot": Param(
            "latest", type="string", description="snapshot id, latest, or none (full replay)"
        ),
    },
    doc_md=__doc__,
):
    for app in apps:
        StatekeeperDrillOperator(
            task_id=f"drill_{app.application_id}",
            spec_path=app.spec_path,
            from_snapshot="{{ params.from_snapshot }}",
        )
    for bad in invalid:  # an invalid spec: a task that fails naming it; the others still run
        invalid_spec_task(f"drill_{bad.name}", bad)
