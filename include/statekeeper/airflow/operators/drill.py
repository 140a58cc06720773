"""Run a restore drill of an app; a failed drill fails the task."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from statekeeper.airflow.operators.base import StatekeeperAppOperator
from statekeeper.airflow.plugin.links import XCOM_KEY, DrillReportLink


class StatekeeperDrillOperator(StatekeeperAppOperator):
    """Restore every store of an app into a sandbox and prove it right (``statekeeper drill``).

    ``from_snapshot``: a snapshot id, ``latest`` (the newest verified one) or ``none`` (full
    changelog replay). ``report_dir``: where the record, report.html and Data Docs go (default
    under the state root). Returns the drill record; raises AirflowException naming the failed
    checks when the drill fails (the record and report are written either way); its "Drill
    report" link opens the report on the State stores page, passed or failed.

    With ``from_snapshot=latest``, an app with neither a snapshot nor committed state yet
    (never ran, or no task has finished a batch) has nothing to drill: the task is skipped
    with that reason. Committed state without a snapshot still fails: that is a real gap.
    """

    operator_extra_links = (DrillReportLink(),)

    template_fields: Sequence[str] = (
        *StatekeeperAppOperator.template_fields,
        "from_snapshot",
        "report_dir",
    )

    def __init__(
        self, *, from_snapshot: str = "latest", report_dir: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.from_snapshot = from_snapshot
        self.report_dir = report_dir

    def execute(self, context: Any) -> dict[str, Any]:
        from pathlib import Path

        from statekeeper.ops.drill import run_drill
        from statekeeper.snapshots.install import LATEST, NONE

        hook = self.app_hook()
        if self.from_snapshot == LATEST:
            self.skip_if_nothing_to_drill(hook)
        storage = None if self.from_snapshot == NONE else hook.snapshot_storage()
        record = run_drill(
            hook.settings,
            hook.topology(),
            storage,
            report_dir=Path(self.report_dir) if self.report_dir else None,
            from_snapshot=self.from_snapshot,
            say=lambda line: self.log.info("drill: %s", line),
        )
        # Before pass/fail: the link of a failed drill opens its report too.
        context["ti"].xcom_push(
            key=XCOM_KEY, value={"app": record.app, "drill_id": record.drill_id}
        )
        self.log.info(
            "%s: drill %s %s, RTO %.3f s; report %s",
            record.app,
            record.drill_id,
            "PASSED" if record.passed else "FAILED",
            record.rto_s,
            record.report_html,
        )
        if not record.passed:
            raise AirflowException(
                f"drill {record.drill_id} of {record.app} failed: "
                + "; ".join(record.failures())
                + f" (report {record.report_html})"
            )
        return record.as_dict()

    def skip_if_nothing_to_drill(self, hook: Any) -> None:
        """Skip (AirflowSkipException with the reason) when the app has no snapshot and no
        committed state yet; return otherwise."""
        from statekeeper.ops.committed_state import committed_state
        from statekeeper.snapshots import SnapshotError, list_snapshots

        committed = committed_state(hook.settings, hook.topology())
        if committed:
            return
        try:
            if list_snapshots(hook.snapshot_storage()):
                return
        except SnapshotError:
            # No manifests yet. The storage itself must still be usable: a missing bucket or
            # bad credentials fail the task here, by name, instead of being skipped.
            hook.snapshot_storage(create=True)
        reason = (
            f"{hook.application_id}: nothing to drill: no snapshot in "
            f"{hook.settings.snapshot_url or 'the default snapshot folder'} and "
            f"{committed.why_none()}"
        )
        self.log.info("%s", reason)
        raise AirflowSkipException(reason)
