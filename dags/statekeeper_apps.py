"""Keeps every enabled app of the specs folder running: one reconcile step per app and run.

Each task reconnects to the app's running launch (or launches it detached with spark-submit
on the `spark_default` connection), then watches it from the triggerer (no worker slot) for
the watch period. A broken health rule (process gone, batches stalled while input is
pending, status unresponsive, source lag growing) kills what is left, waits the backoff and
relaunches: that task instance returns `action: restarted` with the reasons (XCom
`restart`, and its log). Too many restarts within the window mark the app FAILED: its task
fails every run, without relaunching, until a run with `action=restart`.

Manual runs (Trigger DAG w/ config): `action` = reconcile | stop (graceful, stays stopped)
| restart | redeploy with `upgrade_mode` = last-state | snapshot (`snapshot_id`, default
latest) | stateless (local state deleted, rebuilt by full changelog replay); `apps` limits
the action to these app ids; `supervision` overrides thresholds (SupervisionConfig).
Wiring only: the work is in statekeeper.airflow.operators.supervisor.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from statekeeper.airflow.operators import StatekeeperAppSupervisorOperator
from statekeeper.airflow.specs import discover_apps

with DAG(
    dag_id="statekeeper_apps",
    schedule=timedelta(minutes=5),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["statekeeper"],
    params={
        "action": Param(
            "reconcile", enum=["reconcile", "stop", "restart", "redeploy"], description="what to do"
        ),
        "upgrade_mode": Param(
            "last-state",
            enum=["last-state", "snapshot", "stateless"],
            description="redeploy: keep local state, restore a snapshot, or replay changelogs",
        ),
        "snapshot_id": Param("latest", type="string", description="redeploy from this snapshot"),
        "apps": Param([], type="array", description="app ids the action is for (empty: all)"),
        "supervision": Param({}, type="object", description="SupervisionConfig overrides"),
    },
    render_template_as_native_obj=True,
    doc_md=__doc__,
):
    for app in discover_apps():
        StatekeeperAppSupervisorOperator(
            task_id=f"supervise_{app.application_id}",
            application_id=app.application_id,
            spec_path=app.spec_path,
            action="{{ params.action }}",
            upgrade_mode="{{ params.upgrade_mode }}",
            snapshot_id="{{ params.snapshot_id }}",
            apps="{{ params.apps }}",
            supervision="{{ params.supervision }}",
        )
