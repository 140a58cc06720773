"""Daily: audit every app's changelog topics (configs, contents, restore forecast).

Trigger with ``fix: true`` to set wrong topic configs before the verdict, and with
``restore_time_budget_s`` to override the settings' budget: an app whose forecast restore
time exceeds it is snapshotted. Wiring only: the work is in statekeeper.airflow.operators.
"""

from __future__ import annotations

from datetime import datetime

from airflow.sdk import DAG, Param

from statekeeper.airflow.operators import StatekeeperAuditOperator
from statekeeper.airflow.specs import discover, invalid_spec_task

with DAG(
    dag_id="statekeeper_changelog_audit",
    schedule="@daily",
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["statekeeper"],
    params={
        "fix": Param(False, type="boolean", description="set wrong changelog configs first"),
        "restore_time_budget_s": Param(
            None,
            type=["null", "number"],
            description="snapshot apps whose forecast restore time exceeds this (seconds); "
            "empty: the settings' restore_time_budget_s",
        ),
    },
    render_template_as_native_obj=True,
    doc_md=__doc__,
):
    apps, invalid = discover()
    for app in apps:
        StatekeeperAuditOperator(
            task_id=f"audit_{app.application_id}",
            spec_path=app.spec_path,
            fix="{{ params.fix }}",
            restore_time_budget_s="{{ params.restore_time_budget_s }}",
        )
    for bad in invalid:  # an invalid spec: a task that fails naming it; the others still run
        invalid_spec_task(f"audit_{bad.name}", bad)
