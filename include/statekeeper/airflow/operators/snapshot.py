"""Snapshot an app, verify what was written, then apply retention."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from statekeeper.airflow.operators.base import StatekeeperAppOperator


class StatekeeperSnapshotOperator(StatekeeperAppOperator):
    """Snapshot every task and store of an app: a running app through its status endpoint (each
    task at its next commit), a stopped one from its local state. Then re-hash every new
    snapshot (a bad one fails the task) and prune with ``keep`` / ``max_age_h`` / ``grace_h``.

    Pushes the new snapshot ids to XCom (``snapshot_ids``) and returns a summary. Give it
    ``outlets=[snapshot_asset(app_id)]`` so drills can be scheduled on the app's snapshots.
    An app with no committed state yet (never ran, or no task has finished a batch: see
    :mod:`statekeeper.ops.committed_state`) has nothing to snapshot: the task is skipped with
    that reason (and the Asset is not updated), rather than failed.
    """

    template_fields: Sequence[str] = (*StatekeeperAppOperator.template_fields, "keep", "max_age_h")

    def __init__(
        self,
        *,
        keep: int | None = 24,
        max_age_h: float | None = None,
        grace_h: float = 1.0,
        timeout_s: float = 300.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.keep = keep
        self.max_age_h = max_age_h
        self.grace_h = grace_h
        self.timeout_s = timeout_s

    def execute(self, context: Any) -> dict[str, Any]:
        from statekeeper.ops.committed_state import committed_state
        from statekeeper.ops.snapshot_app import snapshot_now
        from statekeeper.snapshots import SnapshotError, list_snapshots, prune, verify_snapshot

        hook = self.app_hook()
        app_id = hook.application_id
        committed = committed_state(hook.settings, hook.topology())
        if not committed:
            raise AirflowSkipException(f"{app_id}: nothing to snapshot: {committed.why_none()}")
        self.log.info("%s: committed batches by task: %s", app_id, committed.committed)
        storage = hook.snapshot_storage(create=True)
        try:
            taken = snapshot_now(hook.settings, hook.topology(), storage, self.timeout_s)
        except SnapshotError as exc:
            raise AirflowException(str(exc)) from exc
        running, ids = taken["running"], taken["snapshot_ids"]
        self.log.info(
            "%s was %s",
            app_id,
            "running: snapshot at its next commit" if running else "stopped: from its local state",
        )
        if not ids:
            raise AirflowException(f"{app_id}: no store was snapshotted (no local task state?)")
        self.log.info("%s: %d snapshot(s) in %s: %s", app_id, len(ids), storage.url, ids)

        new = [m for m in list_snapshots(storage) if m.snapshot_id in set(ids)]
        bad = [r for r in (verify_snapshot(storage, m) for m in new) if not r.ok]
        if bad:
            raise AirflowException(
                f"{app_id}: {len(bad)} new snapshot(s) fail verification: "
                + "; ".join(f"{r.manifest.snapshot_id} {r.bad}" for r in bad)
            )
        report = prune(
            storage,
            keep=None if self.keep is None else int(self.keep),
            max_age=None if self.max_age_h is None else timedelta(hours=float(self.max_age_h)),
            grace=timedelta(hours=self.grace_h),
        )
        self.log.info(
            "%s: kept %d, pruned %d snapshot(s)",
            app_id,
            len(report.kept),
            len(report.deleted_snapshots),
        )
        context["ti"].xcom_push(key="snapshot_ids", value=ids)
        return {
            "application_id": app_id,
            "running": running,
            "url": storage.url,
            "snapshot_ids": ids,
            "verified": len(new),
            "prune": report.as_dict(),
        }
