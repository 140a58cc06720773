"""Health rules and restart policy of a supervised app, in the spirit of the Flink Kubernetes
Operator's: pure functions over observations, no Airflow, no processes.

- :class:`SupervisionConfig`: every threshold in one typed, validated model with defaults,
  overridden per app (the spec's ``supervision:`` mapping) and per run (the DAG's
  ``supervision`` param) through :func:`supervision_config`.
- :class:`HealthMonitor`: fed one :class:`Observation` per check; returns the violated rules
  (process gone, app ERROR, never started, status unresponsive, batch counter stalled while
  input is pending, source lag growing for N consecutive checks, start-up hung in
  REBALANCING, restore not advancing in RESTORING) or nothing. A process that is gone after
  a stop somebody asked for (``make down``, ``action=stop``: an intended-stop record, see
  :mod:`~statekeeper.airflow.supervision.stops`) is reported as ``intended_stop``, which is
  never a crash.
- :func:`decide_restart`: restart after an exponential backoff, or FAILED when the restarts
  within the window reached the limit. Only unplanned exits are restarts: relaunches after
  an intended stop are kept apart (``SupervisionRecord.relaunches``) and never counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from statekeeper.app.supervision_config import SupervisionConfig
from statekeeper.errors import ConfigError
from statekeeper.settings import close_names

#: App states in which the app reports batches (a stall is judged only there).
RUNNING = "RUNNING"
#: App states during start-up (restoring state can take long; no stall rule then).
STARTING = ("CREATED", "REBALANCING", "RESTORING")
#: Start-up before the first micro-batch: topics checked, Spark started, lost batches replayed.
REBALANCING = ("CREATED", "REBALANCING")
RESTORING = "RESTORING"
#: Violation kinds that are not failures: the process is gone because somebody stopped it.
INTENDED_STOP = "intended_stop"


def supervision_config(*layers: tuple[str, Mapping[str, Any] | None]) -> SupervisionConfig:
    """The config from defaults overridden by each ``(source name, mapping)`` layer in turn
    (e.g. ``("spec word_count.yaml", spec.supervision), ("DAG param supervision", {...})``).

    Raises ConfigError naming the source and the field of each problem.
    """
    merged: dict[str, Any] = {}
    known = set(SupervisionConfig.model_fields)
    for source, layer in layers:
        if layer is None:
            continue
        if not isinstance(layer, Mapping):
            raise ConfigError(
                f"supervision settings from {source}: expected a mapping, got {layer!r}"
            )
        unknown = sorted(set(layer) - known)
        if unknown:
            named = ", ".join(f"{name!r}{close_names(name, known)}" for name in unknown)
            raise ConfigError(
                f"supervision settings from {source}: unknown {named}; known: {sorted(known)}"
            )
        try:
            SupervisionConfig(**{**merged, **layer})
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'config'}: {err['msg']}"
                for err in exc.errors()
            )
            raise ConfigError(f"supervision settings from {source}: {problems}") from exc
        merged.update(layer)
    return SupervisionConfig(**merged)


@dataclass(frozen=True)
class Observation:
    """One health check of a launched app.

    ``process_alive`` is None when the process cannot be checked from here (another host);
    ``status`` is the status document of *this* launch (None before it published one);
    ``status_fresh_at`` is when that document was last produced by the live app (the time
    its endpoint answered, or its status file's modification time); ``intended_stop`` is the
    record (``IntendedStop.to_json()``) saying the gone process was stopped on purpose.
    """

    at: float
    process_alive: bool | None
    process_detail: str = ""
    status: dict[str, Any] | None = None
    status_fresh_at: float | None = None
    status_source: str | None = None  # "url" | "file"
    intended_stop: dict[str, Any] | None = None


@dataclass(frozen=True)
class Violation:
    """A broken health rule: ``kind`` (process_gone, app_error, startup_timeout,
    unresponsive, stalled, lag_growing, rebalancing_timeout, restore_stalled; or
    intended_stop, which is no failure) and a sentence for logs and the UI."""

    kind: str
    reason: str


def batches_of(status: Mapping[str, Any] | None) -> int | None:
    """The app's batch counter (micro-batches completed by this launch)."""
    if not status:
        return None
    value = (status.get("throughput") or {}).get("batches")
    return int(value) if value is not None else None


def restore_progress_at(status: Mapping[str, Any] | None) -> tuple[int, float | None]:
    """``(records restored so far, when restore progress was last written)`` over every
    task's ``restore_progress`` (the files workers write while they restore)."""
    restored, latest = 0, None
    for task in ((status or {}).get("task_live") or {}).values():
        progress = (task or {}).get("restore_progress") or {}
        for store in (progress.get("stores") or {}).values():
            restored += int((store or {}).get("restored") or 0)
        at = progress.get("updated_at")
        if at is not None and (latest is None or float(at) > latest):
            latest = float(at)
    return restored, latest


def pending_records(status: Mapping[str, Any] | None) -> int | None:
    """Records the app's sources hold beyond what it processed (sum of per-task source lag);
    None while unknown."""
    if not status:
        return None
    lags = [t.get("source_lag") for t in (status.get("task_live") or {}).values()]
    known = [int(x) for x in lags if x is not None]
    return sum(known) if known else None


@dataclass
class HealthMonitor:
    """Evaluates the health rules over successive observations of one launch."""

    config: SupervisionConfig
    launched_at: float
    _batches: int | None = None
    _batches_since: float | None = None
    _last_lag: int | None = None
    _growth: int = 0
    _lag_from: int | None = None
    _state: str | None = None
    _state_seen: float | None = None
    _restored: int | None = None
    _restored_seen: float | None = None

    def observe(self, obs: Observation) -> list[Violation]:
        """The rules ``obs`` violates (empty: healthy so far)."""
        cfg = self.config
        if obs.process_alive is False:
            if obs.intended_stop:
                return [Violation(INTENDED_STOP, _intended_reason(obs.intended_stop))]
            return [Violation("process_gone", f"process gone: {obs.process_detail}".rstrip(": "))]
        status = obs.status
        if status is None:
            waited = obs.at - self.launched_at
            if waited > cfg.startup_timeout_s:
                return [
                    Violation(
                        "startup_timeout",
                        f"no status {waited:.0f}s after launch "
                        f"(startup_timeout_s={cfg.startup_timeout_s:g})",
                    )
                ]
            return []
        state = status.get("state")
        if state == "ERROR":
            return [Violation("app_error", f"app reported ERROR: {status.get('error') or '?'}")]
        found: list[Violation] = []
        fresh = obs.status_fresh_at if obs.status_fresh_at is not None else obs.at
        silent = obs.at - fresh
        if silent > cfg.heartbeat_timeout_s:
            found.append(
                Violation(
                    "unresponsive",
                    f"status unresponsive for {silent:.0f}s (endpoint silent, file not "
                    f"rewritten; heartbeat_timeout_s={cfg.heartbeat_timeout_s:g})",
                )
            )
        found += self._stall(obs, status)
        found += self._lag_growth(status, obs)
        found += self._startup_hang(obs, status)
        return found

    def _startup_hang(self, obs: Observation, status: Mapping[str, Any]) -> list[Violation]:
        """REBALANCING / RESTORING past their limits without progress.

        Times are the app's own where it gives them (``state_since`` in its status, the
        restore progress files' ``updated_at``), so a hang is judged over its whole length,
        not only over one watch; where it does not, from the first check that saw them. A
        batch ends either state, so progress here is restore progress."""
        cfg = self.config
        state = str(status.get("state") or "")
        if state != self._state:
            self._state, self._state_seen = state, obs.at
        restored, progress_at = restore_progress_at(status)
        if restored != self._restored:
            # Progress seen between two checks (the first check has nothing to compare).
            self._restored_seen = obs.at if self._restored is not None else None
            self._restored = restored
        since = status.get("state_since")
        entered = float(since) if since is not None else float(self._state_seen or obs.at)
        # The latest sign of life: entering the state, restore progress, a batch.
        moved = max(
            entered,
            float(self._restored_seen or entered),
            progress_at if progress_at is not None else entered,
        )
        quiet = obs.at - moved
        if state in REBALANCING:
            pending = pending_records(status)
            if pending == 0 or quiet <= cfg.rebalance_timeout_s:
                return []  # an idle app that caught up has nothing to run: not hung
            what = f"{pending} records pending" if pending else "its source lag still unknown"
            return [
                Violation(
                    "rebalancing_timeout",
                    f"hung in {state} for {quiet:.0f}s with {what}, no micro-batch and no "
                    f"restore progress (rebalance_timeout_s={cfg.rebalance_timeout_s:g})",
                )
            ]
        if state == RESTORING and quiet > cfg.restore_timeout_s:
            # RESTORING is the first micro-batch: no batch completes before it ends.
            return [
                Violation(
                    "restore_stalled",
                    f"RESTORING for {obs.at - entered:.0f}s, restore progress stuck at "
                    f"{restored} records for {quiet:.0f}s "
                    f"(restore_timeout_s={cfg.restore_timeout_s:g})",
                )
            ]
        return []

    def _stall(self, obs: Observation, status: Mapping[str, Any]) -> list[Violation]:
        batches = batches_of(status)
        if batches != self._batches or self._batches_since is None:
            self._batches, self._batches_since = batches, obs.at
            return []
        pending = pending_records(status)
        stuck = obs.at - self._batches_since
        if status.get("state") == RUNNING and pending and stuck > self.config.stall_timeout_s:
            return [
                Violation(
                    "stalled",
                    f"batch counter stalled at {batches} for {stuck:.0f}s while {pending} "
                    f"records are pending (stall_timeout_s={self.config.stall_timeout_s:g})",
                )
            ]
        return []

    def _lag_growth(self, status: Mapping[str, Any], obs: Observation) -> list[Violation]:
        need = self.config.lag_growth_checks
        lag = pending_records(status)
        if need == 0 or lag is None:
            return []
        if self._last_lag is not None and lag > self._last_lag:
            if self._growth == 0:
                self._lag_from = self._last_lag
            self._growth += 1
        elif self._last_lag is not None:
            self._growth = 0
        self._last_lag = lag
        if self._growth >= need:
            return [
                Violation(
                    "lag_growing",
                    f"source lag grew for {self._growth} consecutive checks "
                    f"({self._lag_from} -> {lag} records; lag_growth_checks={need})",
                )
            ]
        return []


def _intended_reason(doc: Mapping[str, Any]) -> str:
    from statekeeper.airflow.supervision.stops import IntendedStop

    stop = IntendedStop.from_json(doc)
    return stop.describe() if stop else "stopped as intended"


def is_running_with_progress(
    status: Mapping[str, Any] | None, batches_at_start: int | None, min_batches: int
) -> bool:
    """The sensor's condition: RUNNING, and either ``min_batches`` more batches than when the
    wait began or nothing pending (an idle app that caught up runs no batch)."""
    if not status or status.get("state") != RUNNING:
        return False
    batches = batches_of(status) or 0
    if batches - (batches_at_start or 0) >= min_batches:
        return True
    return pending_records(status) == 0


@dataclass(frozen=True)
class RestartDecision:
    """What to do about an unhealthy app: ``restart`` after ``backoff_s``, or ``fail``."""

    action: str  # "restart" | "fail"
    backoff_s: float
    restarts_in_window: int
    explanation: str


def backoff_s(config: SupervisionConfig, previous_restarts: int) -> float:
    """Delay before a restart when ``previous_restarts`` happened within the window:
    ``base * factor ** previous``, capped at ``backoff_max_s``."""
    return min(
        config.backoff_max_s, config.backoff_base_s * config.backoff_factor**previous_restarts
    )


def restarts_within(
    history: Sequence[Mapping[str, Any]], now: float, window_s: float
) -> list[Mapping[str, Any]]:
    """The restarts (``{"at": epoch seconds, ...}``) of ``history`` within the last window."""
    return [r for r in history if now - float(r["at"]) <= window_s]


def decide_restart(
    config: SupervisionConfig, history: Sequence[Mapping[str, Any]], now: float
) -> RestartDecision:
    """Restart with exponential backoff, unless the restarts within ``restart_window_s``
    already reached ``max_restarts``: then the app is to be marked FAILED."""
    recent = restarts_within(history, now, config.restart_window_s)
    if len(recent) >= config.max_restarts:
        return RestartDecision(
            "fail",
            0.0,
            len(recent),
            f"{len(recent)} restart(s) within {config.restart_window_s:g}s reached "
            f"max_restarts={config.max_restarts}",
        )
    delay = backoff_s(config, len(recent))
    return RestartDecision(
        "restart",
        delay,
        len(recent),
        f"restart {len(recent) + 1} of at most {config.max_restarts} within "
        f"{config.restart_window_s:g}s, after {delay:g}s backoff",
    )


@dataclass
class SupervisionRecord:
    """What supervision remembers about an app across runs: the running launch's identity
    (a JSON dict, see ``process.AppProcessIdentity``), restart history (unplanned exits
    only: these count towards FAILED), relaunches after intended stops (``make down``;
    never counted), the FAILED mark and whether an operator stopped it."""

    application_id: str
    identity: dict[str, Any] | None = None
    restarts: list[dict[str, Any]] = field(default_factory=list)
    failed: dict[str, Any] | None = None
    stopped: dict[str, Any] | None = None
    relaunches: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "application_id": self.application_id,
            "identity": self.identity,
            "restarts": self.restarts[-50:],  # bounded: the window needs only the recent ones
            "failed": self.failed,
            "stopped": self.stopped,
            "relaunches": self.relaunches[-20:],
        }

    @classmethod
    def from_json(cls, application_id: str, doc: Any) -> SupervisionRecord:
        if not isinstance(doc, Mapping):
            return cls(application_id)
        return cls(
            application_id,
            identity=doc.get("identity"),
            restarts=list(doc.get("restarts") or []),
            failed=doc.get("failed"),
            stopped=doc.get("stopped"),
            relaunches=list(doc.get("relaunches") or []),
        )
