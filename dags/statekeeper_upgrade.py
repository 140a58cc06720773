"""Cut an app over to a new version (another application id), or roll it back.

Trigger with config: `mode` = cutover | rollback; `app` = the new version's app id; for a
cut-over `from_app` = the running version's. A cut-over marks the old version superseded,
stops it gracefully (`stop_old`), migrates its state (the new spec's `migrations:`), reads
the migrated state back and verifies it (`verify`), and marks the new version active; a
rollback makes the old version active again. Then `launch` asks `statekeeper_app_actions`
to start the version that runs now at once (supervision keeps it running from then on;
the superseded one stays stopped). A refusal or a failed step fails `upgrade`, naming it,
and the old version stays active. Wiring only: statekeeper.airflow.operators.upgrade.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Param

from statekeeper.airflow.operators import StatekeeperUpgradeOperator

with DAG(
    dag_id="statekeeper_upgrade",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["statekeeper"],
    params={
        "mode": Param("cutover", enum=["cutover", "rollback"], description="what to do"),
        "app": Param("", type="string", description="the new version's application id"),
        "from_app": Param(
            "", type="string", description="cutover: the running (old) version's app id"
        ),
        "stop_old": Param(
            True, type="boolean", description="stop the version being left if it runs"
        ),
        "verify": Param(True, type="boolean", description="read the migrated state back"),
    },
    render_template_as_native_obj=True,
    doc_md=__doc__,
):
    upgrade = StatekeeperUpgradeOperator(
        task_id="upgrade",
        app="{{ params.app }}",
        from_app="{{ params.from_app }}",
        mode="{{ params.mode }}",
        stop_old="{{ params.stop_old }}",
        verify="{{ params.verify }}",
    )
    launch = TriggerDagRunOperator(
        task_id="launch",
        trigger_dag_id="statekeeper_app_actions",
        conf={
            "action": "restart",
            "apps": "{{ ti.xcom_pull(task_ids='upgrade', key='launch_apps') }}",
        },
    )
    upgrade >> launch
