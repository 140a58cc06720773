"""Keeps every enabled app of the specs folder running (`statekeeper_apps`), and acts on
apps at once when an operator asks (`statekeeper_app_actions`).

`statekeeper_apps` (every 5 min, one run at a time): one step per app reconnects to its
running launch (or launches it detached with spark-submit on `spark_default`), then watches
it from the triggerer (no worker slot) for the watch period, the schedule interval, so the
next run takes over as it ends. A broken health rule (process gone, batches stalled while
input is pending, status unresponsive, lag growing, start-up hung in REBALANCING, restore not
advancing) kills what is left, waits the backoff and relaunches, watched on at once; the
step then ends failed so the restart shows in the grid (reasons in its log and XCom
`restart`). Too many restarts within the window mark the app FAILED: its step fails every
run, naming the remedy, without relaunching. A stop somebody asked for (`make down`, an
action) is no crash: the app is relaunched without counting it.

`statekeeper_app_actions` (Trigger DAG w/ config; not queued behind a watch): `action` =
stop (graceful, stays stopped) | restart (clears FAILED) | redeploy with `upgrade_mode` =
last-state | snapshot (`snapshot_id`) | stateless | migrate (`from_app`: cut over from the
app's previous version, docs/changing-apps.md) | backfill (`statekeeper backfill` first);
`apps` = the app ids (empty: all). A running watch hands over to the new launch.
`statekeeper_apps` still takes the same params (queued behind its running watch). Wiring
only: statekeeper.airflow.supervision.operator.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from airflow.sdk import DAG, Param

from statekeeper.airflow.specs import discover, invalid_spec_task
from statekeeper.airflow.supervision.operator import SupervisedAppOperator


def _params(action: str, actions: list[str]) -> dict[str, Param]:
    return {
        "action": Param(action, enum=actions, description="what to do"),
        "upgrade_mode": Param(
            "last-state",
            enum=["last-state", "snapshot", "stateless", "migrate", "backfill"],
            description="redeploy: keep local state, restore a snapshot, replay changelogs, "
            "migrate from_app's state (cut over from the app's previous version), or "
            "backfill from the sources' history first",
        ),
        "from_app": Param(
            "", type="string", description="upgrade_mode=migrate: the previous version's app id"
        ),
        "snapshot_id": Param("latest", type="string", description="redeploy from this snapshot"),
        "apps": Param([], type="array", description="app ids the action is for (empty: all)"),
        "supervision": Param({}, type="object", description="SupervisionConfig overrides"),
    }


def _steps(prefix: str, actions_only: bool) -> None:
    apps, invalid = discover()
    for bad in invalid:  # an invalid spec: a task that fails naming it; the others still run
        invalid_spec_task(f"{prefix}_{bad.name}", bad)
    for app in apps:
        SupervisedAppOperator(
            task_id=f"{prefix}_{app.application_id}",
            application_id=app.application_id,
            spec_path=app.spec_path,
            action="{{ params.action }}",
            upgrade_mode="{{ params.upgrade_mode }}",
            snapshot_id="{{ params.snapshot_id }}",
            from_app="{{ params.from_app }}",
            apps="{{ params.apps }}",
            supervision="{{ params.supervision }}",
            actions_only=actions_only,
        )


with DAG(
    dag_id="statekeeper_apps",
    schedule=timedelta(minutes=5),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["statekeeper"],
    params=_params("reconcile", ["reconcile", "stop", "restart", "redeploy"]),
    render_template_as_native_obj=True,
    doc_md=__doc__,
):
    _steps("supervise", actions_only=False)

with DAG(
    dag_id="statekeeper_app_actions",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=4,
    tags=["statekeeper"],
    params=_params("restart", ["restart", "stop", "redeploy"]),
    render_template_as_native_obj=True,
    doc_md=__doc__,
):
    _steps("act", actions_only=True)
