"""Audit an app's changelog topics; a failing verdict fails the task."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowException

from statekeeper.airflow.operators.base import StatekeeperAppOperator


class StatekeeperAuditOperator(StatekeeperAppOperator):
    """Audit every changelog topic of an app (``statekeeper audit changelogs``): configs,
    contents, restore forecast. ``fix`` (templated, e.g. ``"{{ params.fix }}"``) sets the
    wrong topic configs first and audits again; a ``fail`` verdict that remains fails the
    task. When the app's forecast restore time exceeds ``restore_time_budget_s`` (templated;
    None: the settings' ``restore_time_budget_s``), the app is snapshotted
    (:mod:`statekeeper.ops.audit.restore_budget`); a snapshot that fails fails the task.
    Returns the audit report with ``restore_budget`` (the check, and the snapshot taken)."""

    template_fields: Sequence[str] = (
        *StatekeeperAppOperator.template_fields,
        "fix",
        "restore_time_budget_s",
    )

    def __init__(
        self,
        *,
        fix: bool | str = False,
        restore_rate: float | None = None,
        measure: bool = True,
        restore_time_budget_s: float | str | None = None,
        snapshot_timeout_s: float = 300.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.fix = fix
        self.restore_time_budget_s = restore_time_budget_s
        self.snapshot_timeout_s = snapshot_timeout_s
        self.restore_rate = restore_rate
        self.measure = measure

    def execute(self, context: Any) -> dict[str, Any]:

        from statekeeper.ops.audit.changelog_audit import audit_changelogs
        from statekeeper.ops.audit.forecast import choose_restore_rate
        from statekeeper.ops.audit.history import AuditHistory
        from statekeeper.ops.audit.restore_budget import enforce_budget
        from statekeeper.snapshots.manifest import SnapshotError

        fix = _as_bool(self.fix)
        hook = self.app_hook()
        settings = hook.settings
        status_file = settings.status_path()
        try:
            storage, note = hook.snapshot_storage(), None
        except SnapshotError as exc:  # no snapshots yet: the forecast is a full replay
            storage, note = None, str(exc)
        topology = hook.topology()
        report = audit_changelogs(
            topology,
            settings.application_id,
            settings.bootstrap_servers,
            fix=fix,
            measure=self.measure,
            restore_rate=choose_restore_rate(self.restore_rate, status_file),
            timeout_s=settings.broker_timeout_s,
            snapshots=storage,
            snapshots_note=note,
        )
        AuditHistory.under(settings.state_dir).append(report.to_dict())  # the State stores page
        for change in report.applied:
            self.log.info(
                "fixed %s: %s %s -> %s", change.topic, change.key, change.before, change.after
            )
        for topic in report.topics:
            self.log.info(
                "%s %s (store %s) %s", topic.verdict, topic.topic, topic.store, topic.reasons()
            )
        budget = _as_budget(self.restore_time_budget_s)
        if budget is None:
            budget = settings.restore_time_budget_s
        try:
            check = enforce_budget(
                report,
                budget,
                settings,
                topology,
                lambda: hook.snapshot_storage(create=True),
                self.snapshot_timeout_s,
            )
        except SnapshotError as exc:
            raise AirflowException(
                f"{settings.application_id}: forecast restore time over the budget of "
                f"{budget}s, and the snapshot failed: {exc}"
            ) from exc
        self.log.info(
            "forecast restore %.4gs (full replay %.4gs), budget %s: %s",
            check.forecast_restore_s,
            check.full_replay_s,
            "none" if budget is None else f"{budget}s",
            f"snapshot taken {check.snapshot}" if check.snapshot else "no snapshot needed",
        )
        if check.snapshot:
            context["ti"].xcom_push(key="snapshot_ids", value=check.snapshot["snapshot_ids"])
        if report.verdict == "fail":
            failing = [t.topic for t in report.topics if t.verdict == "fail"]
            hint = "" if fix else " (run with fix=true to set the wrong configs)"
            raise AirflowException(
                f"changelog audit of {settings.application_id} fails on {failing}{hint}"
            )
        return {**report.to_dict(), "restore_budget": check.to_dict()}


def _as_budget(value: float | str | None) -> float | None:
    """A rendered template gives a number, "None" or ""; None means "the settings'"."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"restore_time_budget_s must be a number, got {value!r}") from None


def _as_bool(value: bool | str) -> bool:
    """A rendered template gives "True"/"False"; a bool stays as it is."""
    if isinstance(value, bool):
        return value
    if str(value).strip().lower() in ("true", "1", "yes"):
        return True
    if str(value).strip().lower() in ("false", "0", "no", "", "none"):
        return False
    raise ValueError(f"fix must be a boolean, got {value!r}")
