"""Cut over between two versions of an app, or roll back, or upgrade through a shadow run
(the ``statekeeper_upgrade`` DAG).

Thin callers of :mod:`statekeeper.upgrade`: the app ids name specs of the specs folder;
the migration runs in the task, one stream task after the other (no Spark job). A refusal
or a failed step fails the task, naming it; the old version then stays active. The task
that leaves a version to run pushes XCom ``launch_apps`` for the next task to start it.

:class:`StatekeeperUpgradeOperator`: ``mode`` cutover | rollback (skipped for shadow).
:class:`StatekeeperShadowStepOperator`: one step of ``mode=shadow``
(:mod:`statekeeper.upgrade.shadow`): migrate, launch, aligned, drill, diff, cutover,
handover, and stop (the shadow launch, when a step failed); skipped for the other modes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

CUTOVER, ROLLBACK, SHADOW = "cutover", "rollback", "shadow"
MODES = (CUTOVER, ROLLBACK, SHADOW)


class StatekeeperUpgradeOperator(BaseOperator):
    """``mode`` cutover: from ``from_app`` to ``app`` (the old version stopped gracefully
    when ``stop_old``, migrated, verified unless ``verify`` is false); rollback: ``app``
    (the version cut over to) superseded and the version it came from active again. All
    fields are templated (DAG params). Returns the report."""

    template_fields: Sequence[str] = ("app", "from_app", "mode", "stop_old", "verify")

    def __init__(
        self,
        *,
        app: str,
        from_app: str = "",
        mode: str = CUTOVER,
        stop_old: bool | str = True,
        verify: bool | str = True,
        stop_timeout_s: float = 120.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.app, self.from_app, self.mode = app, from_app, mode
        self.stop_old, self.verify = stop_old, verify
        self.stop_timeout_s = stop_timeout_s

    def execute(self, context: Any) -> dict[str, Any]:
        from statekeeper.errors import StatekeeperError
        from statekeeper.upgrade import cutover, rollback

        if self.mode == SHADOW:
            raise AirflowSkipException("mode=shadow: the shadow_* steps upgrade")
        new = _target(self.app, "app")
        try:
            if self.mode == ROLLBACK:
                event = rollback(
                    new.settings,
                    stop_new=_as_bool(self.stop_old),
                    stop_timeout_s=self.stop_timeout_s,
                    by=f"statekeeper_upgrade rollback ({context.get('run_id')})",
                )
                context["ti"].xcom_push(key="launch_apps", value=[event.to_app])
                return event.to_json()
            if self.mode != CUTOVER:
                raise AirflowFailException(f"mode {self.mode!r}: expected one of {MODES}")
            old = _target(self.from_app, "from_app")
            report = cutover(
                old.spec,
                new.spec,
                old.settings,
                new.settings,
                stop_old=_as_bool(self.stop_old),
                stop_timeout_s=self.stop_timeout_s,
                verify=_as_bool(self.verify),
                progress=lambda t: self.log.info("migrated task %s: %s", t.task_id, t.note or "ok"),
                by=f"statekeeper_upgrade cutover ({context.get('run_id')})",
            )
        except StatekeeperError as exc:
            raise AirflowFailException(str(exc)) from None
        self.log.info(
            "%s -> %s in %.1f s (old version: %s); verify: %s",
            report.from_app,
            report.to_app,
            report.seconds,
            report.old_stop,
            None if report.verify is None else report.verify.totals(),
        )
        context["ti"].xcom_push(key="launch_apps", value=[report.to_app])
        return report.as_dict()


def _target(app_id: str, param: str) -> Any:
    """The hook of the app ``app_id`` of the specs folder (``param`` names the DAG param,
    for the message when there is none)."""
    from statekeeper.airflow.hooks.app import StatekeeperAppHook
    from statekeeper.airflow.specs import discover_apps

    apps = {a.application_id: a.spec_path for a in discover_apps()}
    if not app_id or app_id not in apps:
        raise AirflowFailException(
            f"{param}={app_id!r} names no app spec of the specs folder "
            f"(apps: {', '.join(sorted(apps)) or 'none'})"
        )
    return StatekeeperAppHook(apps[app_id], {})


SHADOW_STEPS = ("migrate", "launch", "aligned", "drill", "diff", "cutover", "handover", "stop")


class StatekeeperShadowStepOperator(BaseOperator):
    """One step of a shadow upgrade from ``from_app`` (running) to ``app``
    (:mod:`statekeeper.upgrade.shadow`; task ``shadow_<step>``):

    - ``migrate``: the old version's state migrated into the new one's, the old one running;
    - ``launch``: the new version started detached, as supervision starts apps (the
      ``spark_default`` connection's spark-submit); XCom ``identity``; waits until it runs;
    - ``aligned``: waits (``aligned_timeout_s``) until both processed the same input;
    - ``drill``: a restore drill of the new version, with the spec's ``drill_model:``
      recomputation over the whole input when ``drill_spark``; fails unless it passes;
    - ``diff``: states and outputs diffed; fails on an unexpected key or no alignment;
    - ``cutover``: only with the drill passed and the diff clean (both read back from XCom):
      the old version stopped (``stop_old``) and the new one recorded active, nothing
      migrated; the old version's final state is kept for ``mode=rollback``;
    - ``handover``: the shadow launch stopped gracefully so that supervision
      (``statekeeper_app_actions`` restart, the ``launch`` task) runs the new version from
      now on; XCom ``launch_apps``;
    - ``stop``: after a failed step, the shadow launch stopped (the old version stays
      active), unless the new version was made active.

    Skipped unless ``mode`` is shadow. All fields are templated (DAG params)."""

    template_fields: Sequence[str] = (
        "app",
        "from_app",
        "mode",
        "stop_old",
        "drill_spark",
        "aligned_timeout_s",
    )

    def __init__(
        self,
        *,
        step: str,
        app: str,
        from_app: str,
        mode: str = SHADOW,
        stop_old: bool | str = True,
        drill_spark: bool | str = True,
        aligned_timeout_s: float | str = 600.0,
        stop_timeout_s: float = 120.0,
        startup_timeout_s: float = 300.0,
        conn_id: str = "spark_default",
        **kwargs: Any,
    ) -> None:
        if step not in SHADOW_STEPS:
            raise ValueError(f"step {step!r}: expected one of {SHADOW_STEPS}")
        super().__init__(**kwargs)
        self.step, self.app, self.from_app, self.mode = step, app, from_app, mode
        self.stop_old, self.drill_spark = stop_old, drill_spark
        self.aligned_timeout_s = aligned_timeout_s
        self.stop_timeout_s, self.startup_timeout_s = stop_timeout_s, startup_timeout_s
        self.conn_id = conn_id

    def execute(self, context: Any) -> Any:
        from statekeeper.errors import StatekeeperError

        if self.mode != SHADOW:
            raise AirflowSkipException(f"mode={self.mode}: not a shadow upgrade")
        new = _target(self.app, "app")
        old = _target(self.from_app, "from_app")
        try:
            return getattr(self, f"_{self.step}")(context, old, new)
        except StatekeeperError as exc:
            raise AirflowFailException(f"shadow {self.step}: {exc}") from None

    # -- the steps -------------------------------------------------------------------------

    def _migrate(self, context: Any, old: Any, new: Any) -> dict[str, Any]:
        from statekeeper.upgrade.shadow import migrate_beside

        report = migrate_beside(
            old.spec,
            new.spec,
            old.settings,
            new.settings,
            progress=lambda t: self.log.info("migrated task %s: %s", t.task_id, t.note or "ok"),
        )
        self.log.info(
            "%s -> %s: %d task(s) migrated in %.1f s; the old version runs on",
            report.old_application_id,
            report.new_application_id,
            sum(t.migrated for t in report.tasks),
            report.seconds,
        )
        return report.as_dict()

    def _launch(self, context: Any, old: Any, new: Any) -> dict[str, Any]:
        from statekeeper.airflow.hooks.spark_app import StatekeeperSparkAppHook
        from statekeeper.upgrade.cutover import running_pid

        pid = running_pid(new.settings)
        if pid is not None:
            raise AirflowFailException(
                f"{new.application_id} is running already (pid {pid}): a shadow run starts it "
                "on the state just migrated; stop it first"
            )
        hook = StatekeeperSparkAppHook(new.spec_path, {}, self.conn_id)
        identity = hook.launch(upgrade_mode="shadow")
        context["ti"].xcom_push(key="identity", value=identity.to_json())
        self.log.info(
            "%s launched beside %s: pid %d, log %s",
            new.application_id,
            old.application_id,
            identity.pid,
            identity.log_path,
        )
        doc = _wait_running(identity, self.startup_timeout_s)
        return {"identity": identity.to_json(), "state": doc.get("state")}

    def _aligned(self, context: Any, old: Any, new: Any) -> dict[str, Any]:
        from statekeeper.upgrade.shadow import wait_aligned

        identity = self._identity(context)
        report = wait_aligned(
            old.spec,
            new.spec,
            old.settings,
            new.settings,
            timeout_s=float(self.aligned_timeout_s),
            gone=None if identity is None else lambda: _gone(identity),
            say=lambda line: self.log.info("%s", line),
        )
        self.log.info("aligned: state %s", report.compared.totals())
        return {"aligned": report.aligned, "state": report.compared.totals()}

    def _drill(self, context: Any, old: Any, new: Any) -> dict[str, Any]:
        from statekeeper.ops.drill import run_drill

        models = None
        if _as_bool(self.drill_spark) and new.spec.drill_model is not None:
            models = list(new.spec.app_function("drill_model")(new.spec.params)) or None
        if models is None:
            self.log.warning(
                "%s: no PySpark recomputation (drill_spark off, or no drill_model: in its "
                "spec): the drill checks recovery, not the truth of migrated state",
                new.application_id,
            )
        record = run_drill(
            new.settings,
            new.topology(),
            new.snapshot_storage(),
            say=lambda line: self.log.info("drill: %s", line),
            spark_models=models,
        )
        summary = {
            "drill_id": record.drill_id,
            "status": record.status,
            "passed": record.passed,
            "spark": models is not None,
            "failures": record.failures(),
            "report_html": record.report_html,
        }
        context["ti"].xcom_push(key="drill", value=summary)
        if not record.passed:
            raise AirflowFailException(
                f"drill {record.drill_id} of {new.application_id} failed: "
                + "; ".join(record.failures())
                + f" (report {record.report_html})"
            )
        self.log.info("drill %s passed (report %s)", record.drill_id, record.report_html)
        return summary

    def _diff(self, context: Any, old: Any, new: Any) -> dict[str, Any]:
        from statekeeper.upgrade.shadow import diff_when_aligned

        report = diff_when_aligned(
            old.spec,
            new.spec,
            old.settings,
            new.settings,
            timeout_s=float(self.aligned_timeout_s),
        )
        found = report.as_dict()
        context["ti"].xcom_push(key="diff", value=found)
        outputs = None if report.outputs is None else report.outputs.totals()
        self.log.info(
            "diff: aligned %s, state %s, outputs %s",
            report.aligned,
            report.compared.totals(),
            outputs,
        )
        if not report.ok:
            raise AirflowFailException(
                f"{old.application_id} vs {new.application_id}: "
                + (
                    f"not aligned ({'; '.join(report.behind[:5])})"
                    if not report.aligned
                    else f"{report.unexpected} unexpected key(s) (state "
                    f"{report.compared.totals()['unexpected']}, outputs "
                    f"{(outputs or {}).get('unexpected')}): {'; '.join(_examples(found)[:5])}"
                )
            )
        return found

    def _cutover(self, context: Any, old: Any, new: Any) -> dict[str, Any]:
        from statekeeper.upgrade import cutover
        from statekeeper.upgrade.shadow import check_proof

        ti = context["ti"]
        check_proof(
            ti.xcom_pull(task_ids="shadow_drill", key="drill"),
            ti.xcom_pull(task_ids="shadow_diff", key="diff"),
        )
        report = cutover(
            old.spec,
            new.spec,
            old.settings,
            new.settings,
            stop_old=_as_bool(self.stop_old),
            stop_timeout_s=self.stop_timeout_s,
            shadow=True,
            by=f"statekeeper_upgrade shadow ({context.get('run_id')})",
        )
        self.log.info(
            "%s -> %s cut over (old version: %s)", report.from_app, report.to_app, report.old_stop
        )
        return report.as_dict()

    def _handover(self, context: Any, old: Any, new: Any) -> dict[str, Any]:
        stopped = self._stop_shadow(context, "statekeeper_upgrade shadow handover")
        context["ti"].xcom_push(key="launch_apps", value=[new.application_id])
        return {"shadow_launch": stopped, "launch_apps": [new.application_id]}

    def _stop(self, context: Any, old: Any, new: Any) -> dict[str, Any]:
        from statekeeper.versions.history import active_override
        from statekeeper.versions.recorded import state_root

        root = state_root(new.settings.state_dir, new.application_id)
        found = active_override(root, new.application_id)
        if found is not None and found[0]:
            self.log.info("%s is active: its launch is left running", new.application_id)
            return {"shadow_launch": "left running (active)"}
        stopped = self._stop_shadow(context, "statekeeper_upgrade shadow: a step failed")
        self.log.info("%s stays active; %s: %s", old.application_id, new.application_id, stopped)
        return {"shadow_launch": stopped}

    # -- pieces ----------------------------------------------------------------------------

    def _identity(self, context: Any) -> Any:
        from statekeeper.airflow.supervision.process import AppProcessIdentity

        found = context["ti"].xcom_pull(task_ids="shadow_launch", key="identity")
        return None if not found else AppProcessIdentity.from_json(found)

    def _stop_shadow(self, context: Any, by: str) -> str:
        from statekeeper.airflow.supervision.process import stop_app
        from statekeeper.airflow.supervision.stops import CALLER_RELAUNCHES

        identity = self._identity(context)
        if identity is None:
            return "not launched"
        result = stop_app(identity, self.stop_timeout_s, by=by, then=CALLER_RELAUNCHES)
        return f"{result.outcome} ({result.signalled or 'nothing'} in {result.seconds:.1f} s)"


def _wait_running(identity: Any, timeout_s: float) -> dict[str, Any]:
    """The launched app's status once it says RUNNING; AirflowFailException when it exits
    first or the time is up (its log named)."""
    import time

    from statekeeper.airflow.supervision.probe import of_launch, read_status_file

    deadline = time.monotonic() + timeout_s
    while True:
        doc = of_launch(read_status_file(identity.status_file)[0], identity.launched_at) or {}
        if doc.get("state") == "RUNNING":
            return doc
        why = _gone(identity) or (doc.get("state") == "ERROR" and "its state is ERROR")
        if why or time.monotonic() >= deadline:
            raise AirflowFailException(
                f"{identity.application_id} did not start: "
                + (why or f"not RUNNING after {timeout_s:.0f} s")
                + f" (log {identity.log_path})"
            )
        time.sleep(0.5)


def _gone(identity: Any) -> str | None:
    alive, why = identity.alive()
    return None if alive is not False else f"its launch is gone ({why}; log {identity.log_path})"


def _examples(diff: dict[str, Any]) -> list[str]:
    found = [
        f"task {t['task']} store {name}: {e}"
        for t in diff["compared"]["tasks"]
        for name, s in t["stores"].items()
        for e in s["examples"]
    ]
    for topic in (diff.get("outputs") or {}).get("topics", []):
        found += [f"output {topic['new_topic']}: {e}" for e in topic["examples"]]
    return found


def _as_bool(value: bool | str) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes")
