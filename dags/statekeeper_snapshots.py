"""Hourly: snapshot every app in the specs folder, verify, apply retention.

Each app's task updates the Asset ``statekeeper://<app>/snapshots``, which schedules its
restore drill. Wiring only: the work is in statekeeper.airflow.operators.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param

from statekeeper.airflow.operators import StatekeeperSnapshotOperator
from statekeeper.airflow.specs import discover, invalid_spec_task

with DAG(
    dag_id="statekeeper_snapshots",
    schedule="@hourly",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["statekeeper"],
    params={
        "keep": Param(24, type="integer", minimum=0, description="snapshots kept per store"),
    },
    render_template_as_native_obj=True,
    doc_md=__doc__,
):
    apps, invalid = discover()
    for app in apps:
        StatekeeperSnapshotOperator(
            task_id=f"snapshot_{app.application_id}",
            spec_path=app.spec_path,
            keep="{{ params.keep }}",
            outlets=[app.snapshot_asset],
        )
    for bad in invalid:  # an invalid spec: a task that fails naming it; the others still run
        invalid_spec_task(f"snapshot_{bad.name}", bad)
