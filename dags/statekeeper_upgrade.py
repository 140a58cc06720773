"""Cut an app over to a new version (another application id), roll it back, or upgrade it
through a shadow run with proof.

Trigger with config: `mode` = cutover | rollback | shadow; `app` = the new version's app id;
for a cut-over and a shadow upgrade `from_app` = the running version's.

- cutover: marks the old version superseded, stops it gracefully (`stop_old`), migrates its
  state (the new spec's `migrations:`), reads the migrated state back and verifies it
  (`verify`), and marks the new version active (task `upgrade`).
- rollback: makes the old version active again (task `upgrade`).
- shadow (blue/green, one task per step): `shadow_migrate` migrates the old version's state
  while it keeps running; `shadow_launch` starts the new version beside it (spark-submit on
  `spark_default`, as supervision launches apps), on the same sources, writing its own
  outputs; `shadow_aligned` waits (`aligned_timeout_s`) until both processed the same input;
  `shadow_drill` drills the new version (with its spec's PySpark recomputation when
  `drill_spark`); `shadow_diff` diffs states and outputs (equal / expected-different /
  unexpected); `shadow_cutover` stops the old version and makes the new one active, only if
  the drill passed and no key was unexpected (the old version's final state is kept for a
  rollback); `shadow_handover` stops the shadow launch gracefully for supervision to run the
  new version. A failed step leaves the old version active, and `shadow_stop` stops the
  shadow launch.

Then `launch` asks `statekeeper_app_actions` to start the version that runs now at once
(supervision keeps it running from then on; the superseded one stays stopped). A refusal or a
failed step fails its task, naming it. Wiring only: statekeeper.airflow.operators.upgrade.
"""

from __future__ import annotations

from datetime import datetime

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Param

from statekeeper.airflow.operators import StatekeeperUpgradeOperator
from statekeeper.airflow.operators.upgrade import StatekeeperShadowStepOperator

with DAG(
    dag_id="statekeeper_upgrade",
    schedule=None,
    start_date=datetime(2026, 1, 1),
    catchup=False,
    max_active_runs=1,
    tags=["statekeeper"],
    params={
        "mode": Param("cutover", enum=["cutover", "rollback", "shadow"], description="what to do"),
        "app": Param("", type="string", description="the new version's application id"),
        "from_app": Param(
            "", type="string", description="cutover, shadow: the running (old) version's app id"
        ),
        "stop_old": Param(
            True, type="boolean", description="stop the version being left if it runs"
        ),
        "verify": Param(True, type="boolean", description="cutover: read the migrated state back"),
        "drill_spark": Param(
            True,
            type="boolean",
            description="shadow: drill with the spec's PySpark recomputation (drill_model:)",
        ),
        "aligned_timeout_s": Param(
            600,
            type="number",
            description="shadow: how long to wait for both versions to reach the same input",
        ),
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
    shadow = [
        StatekeeperShadowStepOperator(
            task_id=f"shadow_{step}",
            step=step,
            app="{{ params.app }}",
            from_app="{{ params.from_app }}",
            mode="{{ params.mode }}",
            stop_old="{{ params.stop_old }}",
            drill_spark="{{ params.drill_spark }}",
            aligned_timeout_s="{{ params.aligned_timeout_s }}",
        )
        for step in ("migrate", "launch", "aligned", "drill", "diff", "cutover", "handover")
    ]
    for before, after in zip(shadow, shadow[1:], strict=False):
        before >> after
    stop = StatekeeperShadowStepOperator(
        task_id="shadow_stop",
        step="stop",
        app="{{ params.app }}",
        from_app="{{ params.from_app }}",
        mode="{{ params.mode }}",
        trigger_rule="one_failed",
    )
    shadow[1:6] >> stop
    launch = TriggerDagRunOperator(
        task_id="launch",
        trigger_dag_id="statekeeper_app_actions",
        conf={
            "action": "restart",
            "apps": "{{ ti.xcom_pull(task_ids='upgrade', key='launch_apps') or "
            "ti.xcom_pull(task_ids='shadow_handover', key='launch_apps') }}",
        },
        trigger_rule="none_failed_min_one_success",
    )
    [upgrade, shadow[-1]] >> launch
