"""Cut over between two versions of an app, or roll back (the ``statekeeper_upgrade`` DAG).

A thin caller of :mod:`statekeeper.upgrade`: the app ids name specs of the specs folder;
the migration runs in this task, one stream task after the other (no Spark job). A refusal
or a failed step fails the task, naming it; the old version then stays active. It pushes
XCom ``launch_apps``: the version that runs now, for the next task to start at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException

CUTOVER, ROLLBACK = "cutover", "rollback"


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

        new = self._target(self.app, "app")
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
                raise AirflowFailException(f"mode {self.mode!r}: expected cutover or rollback")
            old = self._target(self.from_app, "from_app")
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

    def _target(self, app_id: str, param: str) -> Any:
        from statekeeper.airflow.hooks.app import StatekeeperAppHook
        from statekeeper.airflow.specs import discover_apps

        apps = {a.application_id: a.spec_path for a in discover_apps()}
        if not app_id or app_id not in apps:
            raise AirflowFailException(
                f"{param}={app_id!r} names no app spec of the specs folder "
                f"(apps: {', '.join(sorted(apps)) or 'none'})"
            )
        return StatekeeperAppHook(apps[app_id], {})


def _as_bool(value: bool | str) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in ("1", "true", "yes")
