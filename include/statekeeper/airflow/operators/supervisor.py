"""One reconcile step of a supervised streaming app, as a Kubernetes operator's loop does.

Desired state: the app spec (``enabled``) and the run's ``action``. What runs: the launch
identity (pid + start time, status file, log, launch time) this task keeps

- in the **task state store** (``context["task_state_store"]``), mirrored for retries: its
  scope is one task instance of one DAG run (rows keyed by dag_run_id, task_id, map_index;
  retries share them, the next run does not see them);
- in the **asset state store** of the app's supervision Asset (the task's inlet,
  ``statekeeper://<app>/supervision``), which spans DAG runs: the identity, the restart
  history and the FAILED / stopped marks live there, so the next scheduled run reconnects.

A step: reconnect to the running launch or launch it (detached spark-submit, no worker slot
held), then defer to :class:`AppHealthTrigger`. Healthy after the watch period: the task
succeeds (the next scheduled run watches on). A broken health rule: what is left of the old
process group is killed, the reason recorded, the backoff waited (deferred) and the app
relaunched; the task returns ``{"action": "restarted", "reasons": ...}`` (also XCom
``restart``), so every restart is one task instance in the grid, with its reason in the log
and XCom. Restarts within the window over the limit: the app is marked FAILED, the task
fails (AirflowFailException with the reasons) and every later step fails at once without
relaunching, until a run with ``action=restart`` or ``redeploy``.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from statekeeper.airflow.operators.base import StatekeeperAppOperator
from statekeeper.airflow.specs import supervision_asset
from statekeeper.airflow.supervision.policy import (
    SupervisionConfig,
    SupervisionRecord,
    decide_restart,
    supervision_config,
)
from statekeeper.airflow.supervision.process import (
    AppProcessIdentity,
    kill_group,
    stop_app,
    wait_group_gone,
)
from statekeeper.errors import ConfigError

ACTIONS = ("reconcile", "stop", "restart", "redeploy")
UPGRADE_MODES = ("last-state", "snapshot", "stateless")
RECORD_KEY = "supervision"
_TASK_DIR = re.compile(r"^\d+_\d+$")


class SupervisionStore:
    """The app's supervision record: asset state store (across runs) + task state store
    (this run's identity, a pending restart, the step taken)."""

    def __init__(self, context: Any, application_id: str) -> None:
        self.application_id = application_id
        self.task = context.get("task_state_store")
        stores = context.get("asset_state_store")
        if stores is None:
            raise ConfigError(
                f"no asset state store in the task context: give the supervising task of "
                f"{application_id} the inlet supervision_asset({application_id!r})"
            )
        self.asset = stores[supervision_asset(application_id)]

    def load(self) -> SupervisionRecord:
        record = SupervisionRecord.from_json(self.application_id, self.asset.get(RECORD_KEY))
        mine = self.task.get("identity") if self.task is not None else None
        theirs = record.identity or {}
        # A retry whose launch was written here but not (yet) to the asset store.
        if mine and float(mine.get("launched_at", 0)) > float(theirs.get("launched_at", 0)):
            record.identity = mine
        return record

    def save(self, record: SupervisionRecord) -> None:
        if self.task is not None:
            if record.identity:
                self.task.set("identity", record.identity)
            else:
                self.task.delete("identity")
        self.asset.set(RECORD_KEY, record.to_json())

    def get(self, key: str) -> Any:
        return self.task.get(key) if self.task is not None else None

    def put(self, key: str, value: Any) -> None:
        if self.task is not None:
            if value is None:
                self.task.delete(key)
            else:
                self.task.set(key, value)


class StatekeeperAppSupervisorOperator(StatekeeperAppOperator):
    """Keep one app running: one reconcile step per task instance (see the module doc).

    ``action``: reconcile (default) | stop (graceful: SIGTERM, wait, then kill -9; the app
    stays stopped until restart/redeploy) | restart (stop, clear FAILED/stopped marks and the
    restart history, launch) | redeploy (restart with ``upgrade_mode``: last-state keeps the
    local state; snapshot installs ``snapshot_id`` (``latest`` or an id) into the stopped
    app first; stateless deletes the local task state and starts with
    ``restore_from_snapshots=false``, so every store is rebuilt by replaying its whole
    changelog, while the sources resume at the Spark checkpoint's committed offsets: the
    state is the same, only rebuilt from the log, and no input is reprocessed).
    ``apps``: the app ids a manual action is meant for (empty: all); the others reconcile.
    ``supervision``: SupervisionConfig overrides on top of the spec's ``supervision:``.
    """

    template_fields: Sequence[str] = (
        *StatekeeperAppOperator.template_fields,
        "action",
        "upgrade_mode",
        "snapshot_id",
        "apps",
        "supervision",
    )

    def __init__(
        self,
        *,
        application_id: str,
        action: str = "reconcile",
        upgrade_mode: str = "last-state",
        snapshot_id: str | None = "latest",
        apps: list[str] | None = None,
        supervision: dict[str, Any] | None = None,
        conn_id: str = "spark_default",
        log_dir: str | None = None,
        **kwargs: Any,
    ) -> None:
        inlets = list(kwargs.pop("inlets", None) or [])
        super().__init__(inlets=[*inlets, supervision_asset(application_id)], **kwargs)
        self.application_id = application_id
        self.action = action
        self.upgrade_mode = upgrade_mode
        self.snapshot_id = snapshot_id
        self.apps = apps
        self.supervision = supervision
        self.conn_id = conn_id
        self.log_dir = log_dir

    # -- pieces ----------------------------------------------------------------------------

    def spark_hook(self) -> Any:
        from statekeeper.airflow.hooks.spark_app import StatekeeperSparkAppHook

        return StatekeeperSparkAppHook(self.spec_path, self.settings_overrides, self.conn_id)

    def config(self, hook: Any) -> SupervisionConfig:
        return supervision_config(
            (f"spec {self.spec_path}", hook.spec.supervision),
            ("the task's supervision argument (DAG param supervision)", self.supervision or {}),
        )

    def requested_action(self) -> str:
        action = str(self.action or "reconcile")
        if action not in ACTIONS:
            raise AirflowFailException(f"action {action!r}: expected one of {ACTIONS}")
        if self.upgrade_mode not in UPGRADE_MODES:
            raise AirflowFailException(
                f"upgrade_mode {self.upgrade_mode!r}: expected one of {UPGRADE_MODES}"
            )
        apps = [a for a in (self.apps or []) if a]
        if action != "reconcile" and apps and self.application_id not in apps:
            self.log.info("%s is not in apps=%s: reconcile only", self.application_id, apps)
            return "reconcile"
        return action

    # -- execute ---------------------------------------------------------------------------

    def execute(self, context: Any) -> Any:
        hook = self.spark_hook()
        if hook.application_id != self.application_id:
            raise AirflowFailException(
                f"{self.spec_path} is app {hook.application_id!r}, not {self.application_id!r}"
            )
        cfg = self.config(hook)
        store = SupervisionStore(context, self.application_id)
        if store.get("pending_restart"):  # a retry of a step that died during its backoff
            return self.relaunch_after_backoff(context)
        record = store.load()
        action = self.requested_action()
        self.log.info("%s: action %s, record %s", self.application_id, action, record.to_json())
        if action == "stop":
            result = self._stop(record, cfg, "stopped by an operator (action=stop)")
            record.stopped = {"at": time.time(), "run_id": context["run_id"]}
            store.save(record)
            return result
        if action in ("restart", "redeploy"):
            self._stop(record, cfg, f"action={action}")
            record.failed = record.stopped = None
            record.restarts = []
            store.save(record)  # stopped and cleared, even if the upgrade below fails
            extra: dict[str, Any] = {}
            mode = None
            if action == "redeploy":
                mode = self.upgrade_mode
                extra = self._apply_upgrade_mode(hook, context)
            self._launch(context, hook, store, record, f"action={action}", extra, mode)
            return self._watch(record, cfg)
        return self._reconcile(context, hook, cfg, store, record)

    def _reconcile(
        self, context: Any, hook: Any, cfg: SupervisionConfig, store: SupervisionStore,
        record: SupervisionRecord,
    ) -> Any:  # fmt: skip
        app = self.application_id
        if not hook.spec.enabled:
            result = self._stop(record, cfg, "disabled in its spec (enabled: false)")
            store.save(record)
            return result
        if record.failed:
            raise AirflowFailException(
                f"{app} is FAILED since {_when(record.failed['at'])}: {record.failed['reasons']} "
                f"({record.failed['explanation']}); not relaunched. Trigger the DAG with "
                f"action=restart (or redeploy) to start it again"
            )
        if record.stopped:
            raise AirflowSkipException(
                f"{app} was stopped by an operator at {_when(record.stopped['at'])}; trigger "
                f"the DAG with action=restart to start it again"
            )
        if record.identity:
            identity = AppProcessIdentity.from_json(record.identity)
            alive, detail = identity.alive()
            if alive is not False:
                self.log.info("%s: reconnecting to the running launch (%s)", app, detail)
                store.put("step", {"step": "reconnected", "pid": identity.pid})
                return self._watch(record, cfg)
            return self._unhealthy(
                context,
                store,
                record,
                cfg,
                [
                    {
                        "kind": "process_gone",
                        "reason": f"process gone: {detail} (found at reconcile)",
                    }
                ],
            )
        self._launch(context, hook, store, record, "not running")
        return self._watch(record, cfg)

    # -- launch and watch --------------------------------------------------------------------

    def _launch(
        self, context: Any, hook: Any, store: SupervisionStore, record: SupervisionRecord,
        why: str, extra: dict[str, Any] | None = None, upgrade_mode: str | None = None,
    ) -> AppProcessIdentity:  # fmt: skip
        identity = hook.launch(self.log_dir, extra, upgrade_mode)
        record.identity = identity.to_json()
        store.save(record)
        store.put("step", {"step": "launched", "why": why, "pid": identity.pid})
        self.log.info(
            "%s launched (%s): pid %d, log %s, status %s",
            self.application_id,
            why,
            identity.pid,
            identity.log_path,
            identity.status_file,
        )
        return identity

    def _watch(self, record: SupervisionRecord, cfg: SupervisionConfig) -> Any:
        from statekeeper.airflow.triggers.app_health import AppHealthTrigger

        identity = record.identity or {}
        self.defer(
            trigger=AppHealthTrigger(
                application_id=self.application_id,
                status_file=identity["status_file"],
                launched_at=identity["launched_at"],
                config=cfg.model_dump(),
                identity=identity,
                mode="watch",
            ),
            method_name="on_health_event",
        )

    def on_health_event(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Resumed by the trigger: healthy → done; unhealthy → restart or FAILED."""
        event = event or {}
        hook = self.spark_hook()
        cfg = self.config(hook)
        store = SupervisionStore(context, self.application_id)
        record = store.load()
        step = store.get("step") or {}
        if event.get("healthy"):
            result = {
                "action": step.get("step", "watched"),
                "application_id": self.application_id,
                "pid": (record.identity or {}).get("pid"),
                "checks": event.get("checks"),
                "status": event.get("status"),
            }
            self.log.info("%s healthy: %s", self.application_id, result)
            return result
        current = float((record.identity or {}).get("launched_at", -1))
        if abs(current - float(event.get("launched_at", -2))) > 1e-3:
            raise AirflowFailException(
                f"{self.application_id}: the watched launch is no longer the recorded one "
                f"(another task relaunched it?); not restarting twice"
            )
        return self._unhealthy(context, store, record, cfg, event.get("violations") or [])

    # -- failures --------------------------------------------------------------------------

    def _unhealthy(
        self, context: Any, store: SupervisionStore, record: SupervisionRecord,
        cfg: SupervisionConfig, violations: list[dict[str, Any]],
    ) -> Any:  # fmt: skip
        app = self.application_id
        reasons = "; ".join(v["reason"] for v in violations) or "unknown"
        self.log.warning("%s unhealthy: %s", app, reasons)
        if record.identity:
            identity = AppProcessIdentity.from_json(record.identity)
            if kill_group(identity):  # stalled or half-dead: nothing graceful is left to ask
                self.log.warning("%s: killed what was left of process group %d", app, identity.pid)
            wait_group_gone(identity, 30.0)
        record.identity = None
        now = time.time()
        decision = decide_restart(cfg, record.restarts, now)
        if decision.action == "fail":
            record.failed = {
                "at": now,
                "reasons": reasons,
                "kinds": [v["kind"] for v in violations],
                "explanation": decision.explanation,
                "run_id": context["run_id"],
            }
            store.save(record)
            context["ti"].xcom_push(key="failed", value=record.failed)
            raise AirflowFailException(
                f"{app} marked FAILED: {decision.explanation}; last failure: {reasons}. Not "
                f"relaunched until a run with action=restart (or redeploy)"
            )
        store.save(record)
        store.put(
            "pending_restart",
            {
                "violations": violations,
                "reasons": reasons,
                "backoff_s": decision.backoff_s,
                "explanation": decision.explanation,
                "detected_at": now,
            },
        )
        self.log.warning("%s: %s", app, decision.explanation)
        if decision.backoff_s > 0:
            from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger

            self.defer(
                trigger=TimeDeltaTrigger(timedelta(seconds=decision.backoff_s)),
                method_name="relaunch_after_backoff",
            )
        return self.relaunch_after_backoff(context)

    def relaunch_after_backoff(self, context: Any, event: Any = None) -> dict[str, Any]:
        """After the backoff: relaunch, record the restart and its reason; the step ends."""
        hook = self.spark_hook()
        store = SupervisionStore(context, self.application_id)
        pending = store.get("pending_restart") or {}
        record = store.load()
        identity = self._launch(context, hook, store, record, f"restart: {pending.get('reasons')}")
        ti = context["ti"]
        restart = {
            "at": identity.launched_at,
            "kinds": [v.get("kind") for v in pending.get("violations", [])],
            "reason": pending.get("reasons"),
            "backoff_s": pending.get("backoff_s"),
            "run_id": context["run_id"],
            "try_number": getattr(ti, "try_number", None),
            "pid": identity.pid,
        }
        record.restarts.append(restart)
        store.save(record)
        store.put("pending_restart", None)
        result = {
            "action": "restarted",
            "application_id": self.application_id,
            "reasons": pending.get("reasons"),
            "restart": len(record.restarts),
            "explanation": pending.get("explanation"),
            "backoff_s": pending.get("backoff_s"),
            "pid": identity.pid,
            "launched_at": identity.launched_at,
            "log_path": identity.log_path,
        }
        ti.xcom_push(key="restart", value=result)
        self.log.warning("%s RESTARTED (%s): %s", self.application_id, restart["reason"], result)
        return result

    # -- stop and upgrade modes --------------------------------------------------------------

    def _stop(self, record: SupervisionRecord, cfg: SupervisionConfig, why: str) -> dict[str, Any]:
        """Gracefully stop the recorded launch (if any); the record forgets it."""
        if not record.identity:
            return {
                "action": "stop",
                "application_id": self.application_id,
                "why": why,
                "outcome": "not_running",
            }
        from statekeeper.airflow.supervision.probe import of_launch, read_status_file

        identity = AppProcessIdentity.from_json(record.identity)
        doc = of_launch(read_status_file(identity.status_file)[0], identity.launched_at)
        result = stop_app(
            identity,
            cfg.stop_timeout_s,
            target=cfg.stop_signal_target,
            driver_pid=(doc or {}).get("pid"),
        )
        record.identity = None
        self.log.info(
            "%s stopped (%s): %s after SIGTERM to %s, %.1fs",
            self.application_id,
            why,
            result.outcome,
            result.signalled or "nothing",
            result.seconds,
        )
        return {
            "action": "stop",
            "application_id": self.application_id,
            "why": why,
            "outcome": result.outcome,
            "signalled": result.signalled,
            "seconds": round(result.seconds, 2),
        }

    def _apply_upgrade_mode(self, hook: Any, context: Any) -> dict[str, Any]:
        """Prepare the stopped app's local state for a redeploy (what was done goes to XCom
        ``upgrade``); returns extra settings for this launch."""
        settings = hook.settings
        if self.upgrade_mode == "last-state":
            context["ti"].xcom_push(key="upgrade", value={"mode": "last-state"})
            return {}
        if self.upgrade_mode == "snapshot":
            from statekeeper.ops.restore import LATEST, restore_app

            reports = restore_app(
                settings,
                hook.topology(),
                hook.snapshot_storage(),
                from_snapshot=self.snapshot_id or LATEST,
            )
            restored = [r.as_dict() for r in reports]
            self.log.info(
                "%s restored from snapshot %s: %s",
                self.application_id,
                self.snapshot_id or LATEST,
                [(r.task, r.store, r.source, r.snapshot_id) for r in reports],
            )
            context["ti"].xcom_push(key="upgrade", value={"mode": "snapshot", "stores": restored})
            return {}
        app_dir = Path(settings.state_dir) / settings.application_id
        removed = []
        if app_dir.is_dir():
            for task_dir in sorted(app_dir.iterdir()):
                if task_dir.is_dir() and _TASK_DIR.match(task_dir.name):
                    shutil.rmtree(task_dir)
                    removed.append(task_dir.name)
        self.log.info(
            "%s stateless redeploy: deleted local state of tasks %s; every store replays its "
            "whole changelog (no snapshot), sources resume at the checkpointed offsets",
            self.application_id,
            removed,
        )
        context["ti"].xcom_push(key="upgrade", value={"mode": "stateless", "deleted": removed})
        return {"restore_from_snapshots": False}


def _when(at: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(at)))
