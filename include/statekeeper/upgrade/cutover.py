"""Cut-over and rollback between two versions of an app (two application ids).

A cut-over, in order: every refusal of the migration (:func:`prepare_migration`) before
anything stops; the event ``cutover started`` in both apps' upgrade histories (from then on
the old version is superseded: supervision does not relaunch it); the old version stopped
gracefully if it runs (SIGTERM: it finishes its batch and commits every task); the
migration, which plans the takeover; the verification
(:mod:`statekeeper.upgrade.verify`); ``cutover done``. The new version is then started by
whoever runs apps (supervision sees it active; ``statekeeper app run``) and takes over.
Anything failing records ``cutover failed``, which leaves the old version active.

A rollback makes the old version active again and the new one superseded (stopped if it
runs). The old version's state, changelogs and Spark checkpoint were only ever read, so it
resumes exactly where it stopped and processes what came since (its outputs go to its own
topics again); the new version's state is kept, and a later cut-over to the same
application id needs it removed first (the migration refuses committed state).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.app.spec import AppSpec
from statekeeper.errors import StatekeeperError
from statekeeper.migration.job import MigrationReport, prepare_migration, run_migration
from statekeeper.migration.task import TaskMigration
from statekeeper.procfs import start_epoch, start_ticks
from statekeeper.settings import StatekeeperSettings
from statekeeper.upgrade.verify import VerifyReport, verify_migration
from statekeeper.versions.history import (
    CUTOVER,
    DONE,
    FAILED,
    ROLLBACK,
    STARTED,
    UpgradeEvent,
    read_history,
    record_event,
)
from statekeeper.versions.recorded import state_root

#: States in which an app's status file says its driver runs.
RUNNING_STATES = ("CREATED", "REBALANCING", "RESTORING", "RUNNING", "PENDING_SHUTDOWN")


class UpgradeError(StatekeeperError):
    """A cut-over or rollback that cannot go ahead, or went wrong (the message says which
    version is active)."""


@dataclass
class CutoverReport:
    """What a cut-over did: how the old version stopped, the migration, the verification."""

    from_app: str
    to_app: str
    old_stop: str
    migration: MigrationReport
    verify: VerifyReport | None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "from_app": self.from_app,
            "to_app": self.to_app,
            "old_stop": self.old_stop,
            "migration": self.migration.as_dict(),
            "verify": None if self.verify is None else self.verify.as_dict(),
            "seconds": round(self.seconds, 3),
            "notes": list(self.notes),
        }


def running_pid(settings: StatekeeperSettings) -> int | None:
    """The driver pid of the app when its status file says it runs and that process is
    alive and started no later than the status says (a reused pid is another process),
    else None."""
    import json

    try:
        doc = json.loads(settings.status_path().read_text())
    except (OSError, ValueError):
        return None
    pid = doc.get("pid")
    if doc.get("state") not in RUNNING_STATES or not isinstance(pid, int) or pid <= 0:
        return None
    if start_ticks(pid) is None:  # gone (or a zombie)
        return None
    started, status_started = start_epoch(pid), doc.get("started_at")
    reused = (
        started is not None
        and isinstance(status_started, (int, float))
        and started > status_started + 1.0
    )
    return None if reused else pid


def stop_gracefully(settings: StatekeeperSettings, timeout_s: float) -> str:
    """SIGTERM the app's driver and wait until it is gone; kill -9 after ``timeout_s``
    (the takeover is exact either way; a graceful stop commits every task, so nothing is
    processed again). Says what happened."""
    pid = running_pid(settings)
    if pid is None:
        return "not running"
    started = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    while time.monotonic() - started < timeout_s:
        if start_ticks(pid) is None:
            return f"stopped gracefully (pid {pid}, {time.monotonic() - started:.1f} s)"
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    while start_ticks(pid) is not None:
        time.sleep(0.1)
    return f"killed after {timeout_s:.0f} s without stopping (pid {pid})"


def cutover(
    old_spec: AppSpec,
    new_spec: AppSpec,
    old_settings: StatekeeperSettings,
    new_settings: StatekeeperSettings,
    *,
    stop_old: bool = False,
    stop_timeout_s: float = 120.0,
    verify: bool = True,
    spark_context: Any = None,
    progress: Callable[[TaskMigration], None] | None = None,
    snapshot: bool = True,
    by: str = "statekeeper upgrade cutover",
    scratch_root: Path | None = None,
    shadow: bool = False,
) -> CutoverReport | ShadowCutover:
    """Cut over from ``old_spec``'s app to ``new_spec``'s (module docstring). ``shadow``:
    the new version already runs on state migrated earlier (a shadow run, compared with
    :func:`statekeeper.upgrade.diff.diff_versions`): the old one is stopped and the cut-over
    recorded, nothing migrated."""
    started = time.monotonic()
    old_app, new_app = old_settings.application_id, new_settings.application_id
    if shadow:
        return _cutover_shadow(old_settings, new_settings, stop_old, stop_timeout_s, by)
    prepared = prepare_migration(old_spec, new_spec, old_settings, new_settings, snapshot=snapshot)
    pid = running_pid(old_settings)
    if pid is not None and not stop_old:
        raise UpgradeError(
            f"{old_app} is running (pid {pid}): stop it first (SIGTERM; from Airflow, "
            "statekeeper_app_actions action=stop), or let the cut-over stop it (--stop-old)"
        )
    roots = [
        state_root(old_settings.state_dir, old_app),
        state_root(new_settings.state_dir, new_app),
    ]
    record_event(roots, UpgradeEvent(CUTOVER, old_app, new_app, STARTED, by=by))
    try:
        old_stop = stop_gracefully(old_settings, stop_timeout_s) if pid else "not running"
        migration = run_migration(
            prepared, spark_context=spark_context, progress=progress, scratch_root=scratch_root
        )
        checked = None
        if verify:
            migrated = [t.task_id for t in migration.tasks if t.batch_id is not None]
            checked = verify_migration(prepared.job, migrated, scratch_root=scratch_root)
            if not checked.ok:
                raise UpgradeError(
                    f"the migrated state of {new_app} does not verify ({checked.totals()}): "
                    f"{_first_problem(checked)}; {old_app} stays active"
                )
    except BaseException as exc:
        record_event(
            roots,
            UpgradeEvent(CUTOVER, old_app, new_app, FAILED, by=by, details={"error": str(exc)}),
        )
        raise
    assert migration.takeover is not None
    details = {
        "batch_base": migration.takeover.batch_base,
        "carried_ranges": len(migration.takeover.carried_ranges()),
        "old_stop": old_stop,
        "verify": None if checked is None else checked.totals(),
        "new_digest": (prepared.job.new_fingerprint or {}).get("digest"),
        "old_root": str(roots[0]),
    }
    record_event(roots, UpgradeEvent(CUTOVER, old_app, new_app, DONE, by=by, details=details))
    return CutoverReport(old_app, new_app, old_stop, migration, checked, time.monotonic() - started)


def _cutover_shadow(
    old_settings: StatekeeperSettings,
    new_settings: StatekeeperSettings,
    stop_old: bool,
    stop_timeout_s: float,
    by: str,
) -> ShadowCutover:
    from statekeeper.versions.takeover import read_takeover, takeover_path

    started = time.monotonic()
    old_app, new_app = old_settings.application_id, new_settings.application_id
    new_root = state_root(new_settings.state_dir, new_app)
    takeover = read_takeover(takeover_path(new_root))
    if takeover is None or takeover.from_application_id != old_app or takeover.extra:
        raise UpgradeError(
            f"{new_app} was not migrated from {old_app} ({takeover_path(new_root)} does not "
            "say so): a shadow cut-over needs the new version running on migrated state"
        )
    pid = running_pid(old_settings)
    if pid is not None and not stop_old:
        raise UpgradeError(f"{old_app} is running (pid {pid}): stop it first, or --stop-old")
    roots = [state_root(old_settings.state_dir, old_app), new_root]
    record_event(roots, UpgradeEvent(CUTOVER, old_app, new_app, STARTED, by=by))
    try:
        old_stop = stop_gracefully(old_settings, stop_timeout_s) if pid else "not running"
    except BaseException as exc:
        details = {"error": str(exc)}
        record_event(roots, UpgradeEvent(CUTOVER, old_app, new_app, FAILED, by=by, details=details))
        raise
    details = {"shadow": True, "old_stop": old_stop, "batch_base": takeover.batch_base}
    details["old_root"] = str(roots[0])
    record_event(roots, UpgradeEvent(CUTOVER, old_app, new_app, DONE, by=by, details=details))
    return ShadowCutover(old_app, new_app, old_stop, time.monotonic() - started)


@dataclass
class ShadowCutover:
    """A shadow run's cut-over: the old version stopped, nothing migrated."""

    from_app: str
    to_app: str
    old_stop: str
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "from_app": self.from_app,
            "to_app": self.to_app,
            "shadow": True,
            "old_stop": self.old_stop,
            "seconds": round(self.seconds, 3),
        }


def rollback(
    new_settings: StatekeeperSettings,
    *,
    stop_new: bool = False,
    stop_timeout_s: float = 120.0,
    by: str = "statekeeper upgrade rollback",
) -> UpgradeEvent:
    """Make the version ``new_settings``' app was cut over from active again (module
    docstring); the event recorded."""
    new_app = new_settings.application_id
    root = state_root(new_settings.state_dir, new_app)
    cut = [e for e in read_history(root) if e.to_app == new_app and e.kind == CUTOVER]
    if not cut or cut[-1].stage != DONE:
        raise UpgradeError(
            f"{new_app} was not cut over to (no finished cut-over in {root / 'upgrades.json'}): "
            "nothing to roll back"
        )
    latest = read_history(root)[-1]
    if latest.kind == ROLLBACK and latest.from_app == new_app:
        raise UpgradeError(f"{new_app} was rolled back to {latest.to_app} already")
    old_app = cut[-1].from_app
    pid = running_pid(new_settings)
    if pid is not None and not stop_new:
        raise UpgradeError(
            f"{new_app} is running (pid {pid}): stop it first, or let the rollback stop it "
            "(--stop-new)"
        )
    stopped = stop_gracefully(new_settings, stop_timeout_s) if pid else "not running"
    event = UpgradeEvent(ROLLBACK, new_app, old_app, DONE, by=by, details={"new_stop": stopped})
    old_root = Path(cut[-1].details.get("old_root") or state_root(new_settings.state_dir, old_app))
    record_event([root, old_root], event)
    return event


def _first_problem(report: VerifyReport) -> str:
    for task in report.tasks:
        if not task.aligned:
            return f"task {task.task_id} is not at the old commit ({task.positions})"
        for store, diff in task.stores.items():
            if diff.unexpected:
                return f"task {task.task_id} store {store}: {'; '.join(diff.examples)}"
    return "no details"
