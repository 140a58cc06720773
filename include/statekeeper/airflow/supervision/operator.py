"""The supervising step the ``statekeeper_apps`` and ``statekeeper_app_actions`` DAGs run:
:class:`SupervisedAppOperator`, one reconcile step of a supervised streaming app, as a
Kubernetes operator's loop does.

Desired state: the app spec (``enabled``) and the run's ``action``. What runs: the launch
identity (pid + start time, status file, log, launch time) the step keeps

- in the **task state store** (``context["task_state_store"]``), mirrored for retries: its
  scope is one task instance of one DAG run (rows keyed by dag_run_id, task_id, map_index;
  retries share them, the next run does not see them);
- in the **asset state store** of the app's supervision Asset (the task's inlet,
  ``statekeeper://<app>/supervision``), which spans DAG runs: the identity, the restart
  history and the FAILED / stopped marks live there, so the next scheduled run reconnects.

A step reconnects to the running launch or launches it (detached spark-submit, no worker
slot held), then defers to :class:`AppHealthTrigger`. A broken health rule: what is left of
the old process group is killed, the reason recorded, the backoff waited (deferred) and the
app relaunched. Restarts within the window over the limit: the app is marked FAILED and
every later step fails at once without relaunching, until a run with ``action=restart`` or
``redeploy``. What makes the step trustworthy to an operator:

- **Intended stops are not crashes.** Every stop asked for (``action=stop|restart|
  redeploy``, ``make down``) is written down beside the app's status file before the app is
  signalled (:mod:`~statekeeper.airflow.supervision.stops`). A process found gone with such
  a record is relaunched at once when the stop was the platform's (``then: relaunch``),
  recorded under ``relaunches``, and never counted towards FAILED; only unplanned exits are
  restarts.
- **Continuous watching.** A step watches for ``watch_period_s`` (the DAG's schedule
  interval: the next run, queued behind this one, starts as it ends), relaunches included: a
  relaunched app is watched at once, by the same step. A watch that finds its launch
  replaced by another task (an ``action=restart`` run) watches the new launch instead.
- **Restarts are visible.** A step in which the app had to be restarted ends *failed*
  (``restarted_step_fails``, default on) with the restarts and reasons in its log, its
  error and XCom ``restart``/``step``, although the app runs again; a FAILED app's step
  fails naming the remedy. The supervision record is copied beside the app's status file
  (:mod:`~statekeeper.airflow.supervision.summary`) for the State stores page and
  ``statekeeper platform status``.
- **Actions act at once.** With ``actions_only`` (the ``statekeeper_app_actions`` DAG, no
  ``max_active_runs`` queue behind a running watch) a step performs the requested action and
  returns; apps the run is not for are skipped.
"""

from __future__ import annotations

import contextlib
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
    INTENDED_STOP,
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
from statekeeper.airflow.supervision.stops import (
    CALLER_RELAUNCHES,
    STAY_STOPPED,
    IntendedStop,
)
from statekeeper.airflow.supervision.summary import remedy, write_supervision_file
from statekeeper.errors import ConfigError
from statekeeper.state.task_id import TaskId

ACTIONS = ("reconcile", "stop", "restart", "redeploy")
UPGRADE_MODES = ("last-state", "snapshot", "stateless", "migrate", "backfill")
#: How long ``upgrade_mode=backfill`` may run before the step fails.
BACKFILL_TIMEOUT_S = 6 * 3600.0
RECORD_KEY = "supervision"
#: How long a watch whose launch an action stopped waits for that action's new launch.
HANDOVER_WAIT_S = 120.0
#: Poll interval of that wait.
HANDOVER_POLL_S = 2.0


class SupervisionStore:
    """The app's supervision record: asset state store (across runs) + task state store
    (this run's identity, a pending restart, the step taken), copied beside the app's status
    file at each save (the page and ``platform status`` read the copy)."""

    def __init__(
        self, context: Any, application_id: str, app_dir: Any, config: SupervisionConfig
    ) -> None:
        self.application_id = application_id
        self.app_dir = app_dir
        self.config = config
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
        self.mirror(record)

    def mirror(self, record: SupervisionRecord) -> None:
        """Write the copy only (e.g. at the start of a step, so it is there and current
        whatever the step then does)."""
        with contextlib.suppress(OSError):  # the copy is for people; Airflow's is the record
            write_supervision_file(self.app_dir, record, self.config)

    def get(self, key: str) -> Any:
        return self.task.get(key) if self.task is not None else None

    def put(self, key: str, value: Any) -> None:
        if self.task is not None:
            if value is None:
                self.task.delete(key)
            else:
                self.task.set(key, value)


class SupervisedAppOperator(StatekeeperAppOperator):
    """Keep one app running: one reconcile step per task instance (see the module doc).

    ``action``: reconcile (default) | stop (graceful: SIGTERM, wait, then kill -9; the app
    stays stopped until restart/redeploy) | restart (stop, clear FAILED/stopped marks and the
    restart history, launch) | redeploy (restart with ``upgrade_mode``: last-state keeps the
    local state; snapshot installs ``snapshot_id`` (``latest`` or an id) into the stopped
    app first; stateless deletes the local task state and starts with
    ``restore_from_snapshots=false``, so every store is rebuilt by replaying its whole
    changelog, while the sources resume at the Spark checkpoint's committed offsets: the
    state is the same, only rebuilt from the log, and no input is reprocessed; migrate cuts
    over from ``from_app``, the app's previous version under another application id: stops
    it, migrates its state into this app's, verifies it and marks this app active
    (:mod:`statekeeper.upgrade`), then this app takes over where the old one stopped;
    backfill runs ``statekeeper backfill`` first (the app's topology in batch over its
    sources' history up to now, then the stream continues from there).
    ``apps``: the app ids a manual action is meant for (empty: all); the others reconcile.
    ``supervision``: SupervisionConfig overrides on top of the spec's ``supervision:``.
    ``actions_only``: perform the run's ``action`` (stop | restart | redeploy) and return
    without watching, skipping apps the run is not for (the actions DAG).
    """

    template_fields: Sequence[str] = (
        *StatekeeperAppOperator.template_fields,
        "action",
        "upgrade_mode",
        "snapshot_id",
        "from_app",
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
        from_app: str | None = None,
        apps: list[str] | None = None,
        supervision: dict[str, Any] | None = None,
        conn_id: str = "spark_default",
        log_dir: str | None = None,
        actions_only: bool = False,
        **kwargs: Any,
    ) -> None:
        inlets = list(kwargs.pop("inlets", None) or [])
        super().__init__(inlets=[*inlets, supervision_asset(application_id)], **kwargs)
        self.application_id = application_id
        self.action = action
        self.upgrade_mode = upgrade_mode
        self.snapshot_id = snapshot_id
        self.from_app = from_app
        self.apps = apps
        self.supervision = supervision
        self.conn_id = conn_id
        self.log_dir = log_dir
        self.actions_only = actions_only

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

    def _pieces(self, context: Any) -> tuple[Any, SupervisionConfig, SupervisionStore]:
        hook = self.spark_hook()
        cfg = self.config(hook)
        app_dir = hook.settings.status_path().absolute().parent
        return hook, cfg, SupervisionStore(context, self.application_id, app_dir, cfg)

    def _run_label(self, context: Any) -> str:
        return f"run {context.get('run_id')}"

    # -- execute ---------------------------------------------------------------------------

    def execute(self, context: Any) -> Any:
        hook, cfg, store = self._pieces(context)
        if hook.application_id != self.application_id:
            raise AirflowFailException(
                f"{self.spec_path} is app {hook.application_id!r}, not {self.application_id!r}"
            )
        if store.get("pending_restart"):  # a retry of a step that died during its backoff
            return self.relaunch_after_backoff(context)
        if store.get("watch_until") is None:
            store.put("watch_until", time.time() + cfg.watch_period_s)
        record = store.load()
        store.mirror(record)
        action = self.requested_action()
        self.log.info("%s: action %s, record %s", self.application_id, action, record.to_json())
        if self.actions_only and action == "reconcile":
            raise AirflowSkipException(
                f"{self.application_id} is not among the apps this run acts on ({self.apps})"
            )
        if action == "stop":
            why = f"action=stop ({self._run_label(context)})"
            result = self._stop_as(record, cfg, why, STAY_STOPPED)
            record.stopped = {"at": time.time(), "run_id": context["run_id"], "by": why}
            store.save(record)
            return result
        if action in ("restart", "redeploy"):
            why = f"action={action} ({self._run_label(context)})"
            stopped = self._stop_as(record, cfg, why, CALLER_RELAUNCHES)
            record.failed = record.stopped = None
            record.restarts = []
            store.save(record)  # stopped and cleared, even if the upgrade below fails
            extra: dict[str, Any] = {}
            mode = None
            if action == "redeploy":
                mode = self.upgrade_mode
                extra = self._apply_upgrade_mode(hook, context)
            identity = self._launch(context, hook, store, record, f"action={action}", extra, mode)
            result = {
                "action": action,
                "application_id": self.application_id,
                "stopped": stopped,
                "pid": identity.pid,
                "launched_at": identity.launched_at,
                "log_path": identity.log_path,
            }
            if self.actions_only:
                return result
            return self._watch_on(context, store, record, cfg)
        return self._reconcile(context, hook, cfg, store, record)

    def _reconcile(
        self, context: Any, hook: Any, cfg: SupervisionConfig, store: SupervisionStore,
        record: SupervisionRecord,
    ) -> Any:  # fmt: skip
        app = self.application_id
        run, why, decided_at = self._desired(hook)
        if not run:
            result = self._stop_as(record, cfg, why, STAY_STOPPED)
            store.save(record)
            return result
        if record.stopped and decided_at is not None and decided_at > record.stopped["at"]:
            # Made active by a cut-over or rollback after an operator's stop: that decides.
            self.log.info("%s: %s, after its stop by %s", app, why, record.stopped.get("by"))
            record.stopped = None
            store.save(record)
        if record.failed:
            raise AirflowFailException(
                f"{app} is FAILED since {_when(record.failed['at'])}: {record.failed['reasons']} "
                f"({record.failed['explanation']}); not relaunched. Remedy: {remedy(app)}"
            )
        if record.stopped:
            raise AirflowSkipException(
                f"{app} was stopped by an operator at {_when(record.stopped['at'])}; trigger "
                f"the statekeeper_app_actions DAG with action=restart to start it again"
            )
        if record.identity:
            identity = AppProcessIdentity.from_json(record.identity)
            alive, detail = identity.alive()
            if alive is not False:
                self.log.info("%s: reconnecting to the running launch (%s)", app, detail)
                store.put("step", {"step": "reconnected", "pid": identity.pid})
                return self._watch_on(context, store, record, cfg)
            stop = identity.intended_stop()
            if stop is not None:
                return self._after_intended_stop(context, store, record, cfg, identity, stop)
            if superseded := self._superseded(hook):
                return self._gone_superseded(context, store, record, cfg, identity, superseded)
            violation = {
                "kind": "process_gone",
                "reason": f"process gone: {detail} (found at reconcile)",
            }
            return self._unhealthy(context, store, record, cfg, [violation])
        self._launch(context, hook, store, record, "not running")
        return self._watch_on(context, store, record, cfg)

    # -- launch and watch ------------------------------------------------------------------

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

    def _watch_on(
        self, context: Any, store: SupervisionStore, record: SupervisionRecord,
        cfg: SupervisionConfig,
    ) -> Any:  # fmt: skip
        """Watch the recorded launch for the rest of this step's period (defers), or end the
        step when the period is over."""
        from statekeeper.airflow.triggers.app_health import AppHealthTrigger

        identity = record.identity or {}
        until = float(store.get("watch_until") or time.time() + cfg.watch_period_s)
        left = until - time.time()
        if not identity or left <= 0 or self.actions_only:
            return self._finish(context, store, record, cfg, {})
        period = max(left, cfg.check_interval_s)
        store.put("watching", identity)
        self.defer(
            trigger=AppHealthTrigger(
                application_id=self.application_id,
                status_file=identity["status_file"],
                launched_at=identity["launched_at"],
                config=cfg.model_copy(update={"watch_period_s": period}).model_dump(),
                identity=identity,
                mode="watch",
            ),
            method_name="on_health_event",
        )

    def on_health_event(self, context: Any, event: dict[str, Any] | None = None) -> Any:
        """Resumed by the trigger: healthy to the end → the step ends; an intended stop → as
        its record says; unhealthy → restart (watched on) or FAILED."""
        event = event or {}
        _hook, cfg, store = self._pieces(context)
        record = store.load()
        if event.get("healthy"):
            return self._finish(context, store, record, cfg, event)
        watched = AppProcessIdentity.from_json(store.get("watching") or record.identity or {})
        violations = event.get("violations") or []
        recorded = float((record.identity or {}).get("launched_at", -1))
        if abs(recorded - float(event.get("launched_at", -2))) > 1e-3:
            # Another task (an action run) replaced or stopped the launch this step watched.
            return self._handover(context, store, record, cfg, f"launch {watched.pid} replaced")
        if any(v.get("kind") == INTENDED_STOP for v in violations):
            stop = watched.intended_stop()
            if stop is not None:
                return self._after_intended_stop(context, store, record, cfg, watched, stop)
        if superseded := self._superseded(_hook):
            return self._gone_superseded(context, store, record, cfg, watched, superseded)
        return self._unhealthy(context, store, record, cfg, violations)

    # -- upgrades: the version cut over to runs, the one cut over from stays stopped -----

    def _desired(self, hook: Any) -> tuple[bool, str, float | None]:
        from statekeeper.versions.history import desired_running
        from statekeeper.versions.recorded import state_root

        settings = hook.settings
        root = state_root(settings.state_dir, settings.application_id)
        return desired_running(hook.spec.enabled, root, settings.application_id)

    def _superseded(self, hook: Any) -> str | None:
        """Why the app is to stay stopped after a cut-over (or rollback) away from it."""
        run, why, decided_at = self._desired(hook)
        return None if run or decided_at is None else why

    def _gone_superseded(
        self, context: Any, store: SupervisionStore, record: SupervisionRecord,
        cfg: SupervisionConfig, gone: AppProcessIdentity, why: str,
    ) -> Any:  # fmt: skip
        """The launch is gone because a cut-over stopped it: not a crash, not relaunched."""
        self.log.info("%s: pid %d gone: %s (not a crash)", self.application_id, gone.pid, why)
        record.identity = None
        store.save(record)
        return self._finish(context, store, record, cfg, {}, note=why)

    def _after_intended_stop(
        self, context: Any, store: SupervisionStore, record: SupervisionRecord,
        cfg: SupervisionConfig, gone: AppProcessIdentity, stop: IntendedStop,
    ) -> Any:  # fmt: skip
        """The recorded launch ``gone`` was stopped on purpose: relaunch it (uncounted) when
        the platform stopped it, keep it stopped for an operator's stop, leave it to the
        task that stopped it when that task relaunches it."""
        app = self.application_id
        self.log.info("%s: pid %d %s (then: %s)", app, gone.pid, stop.describe(), stop.then)
        if stop.then == STAY_STOPPED:
            if not record.stopped:  # the stopping task had not recorded it (yet)
                record.identity = None
                record.stopped = {"at": stop.at, "by": stop.by, "run_id": context["run_id"]}
                store.save(record)
            return self._finish(context, store, record, cfg, {}, note=stop.describe())
        if stop.then == CALLER_RELAUNCHES:
            return self._handover(context, store, record, cfg, stop.describe())
        return self._relaunch_uncounted(context, store, record, cfg, stop.by, stop.at)

    def _relaunch_uncounted(
        self, context: Any, store: SupervisionStore, record: SupervisionRecord,
        cfg: SupervisionConfig, by: str, stopped_at: float,
    ) -> Any:  # fmt: skip
        """Launch again after an intended stop: recorded under ``relaunches``, no backoff,
        not a restart; watched on at once."""
        when = _when(stopped_at)
        record.identity = None
        record.relaunches.append(
            {"at": time.time(), "by": by, "stopped_at": stopped_at, "run_id": context["run_id"]}
        )
        store.save(record)
        why = f"relaunch after it was stopped as intended by {by} at {when}"
        self._launch(context, self.spark_hook(), store, record, why)
        store.put("notes", [*(store.get("notes") or []), f"{why} (not a restart)"])
        return self._watch_on(context, store, record, cfg)

    def _handover(
        self, context: Any, store: SupervisionStore, record: SupervisionRecord,
        cfg: SupervisionConfig, why: str,
    ) -> Any:  # fmt: skip
        """The watched launch was stopped or replaced by another task: watch its new launch
        for the rest of the period; wait (deferred) while that task is between its stop and
        its launch; end when the app is to stay stopped."""
        watching = store.get("watching") or {}
        current = record.identity or {}
        if record.stopped or record.failed:
            store.put("handover_since", None)
            return self._finish(context, store, record, cfg, {}, note=f"{why}; not running now")
        if current and current.get("launched_at") != watching.get("launched_at"):
            self.log.info(
                "%s: %s; watching the new launch (pid %s) for the rest of the period",
                self.application_id,
                why,
                current.get("pid"),
            )
            notes = [*(store.get("notes") or []), f"{why}; now watching pid {current.get('pid')}"]
            store.put("notes", notes)
            store.put("handover_since", None)
            return self._watch_on(context, store, record, cfg)
        since = float(store.get("handover_since") or time.time())
        store.put("handover_since", since)
        if time.time() - since > HANDOVER_WAIT_S + cfg.stop_timeout_s:
            store.put("handover_since", None)
            self.log.warning(
                "%s: %s, and no new launch came: relaunching", self.application_id, why
            )
            return self._relaunch_uncounted(
                context, store, record, cfg, f"{why} (its relaunch did not come)", since
            )
        from airflow.providers.standard.triggers.temporal import TimeDeltaTrigger

        store.put("handover_why", why)
        self.defer(
            trigger=TimeDeltaTrigger(timedelta(seconds=HANDOVER_POLL_S)),
            method_name="on_handover_poll",
        )

    def on_handover_poll(self, context: Any, event: Any = None) -> Any:
        """Resumed while waiting for another task's relaunch (see :meth:`_handover`)."""
        _hook, cfg, store = self._pieces(context)
        return self._handover(
            context, store, store.load(), cfg, store.get("handover_why") or "handed over"
        )

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
            context["ti"].xcom_push(key="failed", value={**record.failed, "remedy": remedy(app)})
            raise AirflowFailException(
                f"{app} marked FAILED: {decision.explanation}; last failure: {reasons}. Not "
                f"relaunched until an operator acts. Remedy: {remedy(app)}"
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

    def relaunch_after_backoff(self, context: Any, event: Any = None) -> Any:
        """After the backoff: relaunch, record the restart and its reason, watch on."""
        hook, cfg, store = self._pieces(context)
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
        store.put("step_restarts", [*(store.get("step_restarts") or []), result])
        self.log.warning("%s RESTARTED (%s): %s", self.application_id, restart["reason"], result)
        return self._watch_on(context, store, record, cfg)

    # -- the end of a step -----------------------------------------------------------------

    def _finish(
        self, context: Any, store: SupervisionStore, record: SupervisionRecord,
        cfg: SupervisionConfig, event: dict[str, Any], note: str | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """The step's result (XCom ``return_value`` and ``step``); fails the step when the
        app had to be restarted in it (``restarted_step_fails``), naming the restarts."""
        step = store.get("step") or {}
        restarts = store.get("step_restarts") or []
        notes = [*(store.get("notes") or []), *([note] if note else [])]
        result = {
            "action": "restarted" if restarts else step.get("step", "watched"),
            "application_id": self.application_id,
            "pid": (record.identity or {}).get("pid"),
            "checks": event.get("checks"),
            "status": event.get("status"),
            "restarts": restarts,
            "notes": notes,
        }
        if restarts:
            last = restarts[-1]
            result.update(
                {k: last[k] for k in ("reasons", "restart", "backoff_s", "launched_at", "log_path")}
            )
        context["ti"].xcom_push(key="step", value=result)
        if restarts and cfg.restarted_step_fails:
            reasons = "; ".join(str(r.get("reasons")) for r in restarts)
            state = (event.get("status") or {}).get("state") or "launched"
            raise AirflowFailException(
                f"{self.application_id} was RESTARTED {len(restarts)}x in this step ({reasons}); "
                f"it runs again (pid {result['pid']}, {state}). This step fails so the restart "
                f"shows in the grid (supervision restarted_step_fails=false: it succeeds)"
            )
        self.log.info("%s step done: %s", self.application_id, result)
        return result

    # -- stop and upgrade modes ------------------------------------------------------------

    def _stop_as(
        self, record: SupervisionRecord, cfg: SupervisionConfig, why: str, then: str
    ) -> dict[str, Any]:
        """Gracefully stop the recorded launch (if any), its intended stop written first
        (``then``: what should follow); the record forgets the launch."""
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
            by=why,
            then=then,
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
        if self.upgrade_mode == "migrate":
            return self._cut_over(hook, context)
        if self.upgrade_mode == "backfill":
            return self._backfill(context)
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
                if task_dir.is_dir() and TaskId.try_parse(task_dir.name) is not None:
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

    def _backfill(self, context: Any) -> dict[str, Any]:
        """``upgrade_mode=backfill``: the stopped app's history processed in batch up to now
        (``statekeeper backfill``, in a child process, on the settings' spark_master) before
        the stream is launched; it continues where the backfill stopped."""
        import json
        import subprocess
        import sys

        cmd = [sys.executable, "-m", "statekeeper.cli", "backfill", "--app", self.spec_path]
        for key, value in self.settings_overrides.items():
            cmd += ["--set", f"{key}={value}"]
        done = subprocess.run(
            [*cmd, "--json"], capture_output=True, text=True, timeout=BACKFILL_TIMEOUT_S
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise AirflowFailException(f"upgrade_mode=backfill failed ({done.returncode}): {last}")
        report = json.loads(done.stdout)
        self.log.info("%s backfilled: %s", self.application_id, done.stdout[-2000:])
        context["ti"].xcom_push(key="upgrade", value={"mode": "backfill", "report": report})
        return {}

    def _cut_over(self, hook: Any, context: Any) -> dict[str, Any]:
        """``upgrade_mode=migrate``: cut over from ``from_app`` to this app before it is
        launched (the old version stopped gracefully, its state migrated and verified)."""
        from statekeeper.airflow.hooks.app import StatekeeperAppHook
        from statekeeper.airflow.specs import discover_apps
        from statekeeper.errors import StatekeeperError
        from statekeeper.upgrade import cutover

        specs = {a.application_id: a.spec_path for a in discover_apps()}
        if not self.from_app or self.from_app not in specs:
            raise AirflowFailException(
                f"upgrade_mode=migrate: from_app={self.from_app!r} names no app spec of the "
                f"specs folder (apps: {', '.join(sorted(specs))})"
            )
        old = StatekeeperAppHook(specs[self.from_app], {})
        try:
            report = cutover(
                old.spec,
                hook.spec,
                old.settings,
                hook.settings,
                stop_old=True,
                by=f"upgrade_mode=migrate ({self._run_label(context)})",
            )
        except StatekeeperError as exc:
            raise AirflowFailException(
                f"upgrade_mode=migrate from {self.from_app}: {exc}"
            ) from None
        self.log.info(
            "%s: cut over from %s (%s); verify %s",
            self.application_id,
            self.from_app,
            report.old_stop,
            None if report.verify is None else report.verify.totals(),
        )
        context["ti"].xcom_push(
            key="upgrade",
            value={"mode": "migrate", "from_app": self.from_app, "report": report.as_dict()},
        )
        return {}


def _when(at: Any) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(at)))
