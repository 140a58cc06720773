"""What the executors report back to the driver beside each batch's results: restores by
cause, stale copies closed, records fencing stopped, standby lag and events (replayed to the
app's standby listeners) and query endpoints (which go into the next placement).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from statekeeper.cluster.executor import DRIVER_EXECUTOR_ID
from statekeeper.placement.assignment import ExecutorEndpoint
from statekeeper.standby.listener import replay_event
from statekeeper.worker.task_run import TaskRunResult
from statekeeper.worker.task_runner import ExecutorReport, StaleCopyClosed

log = logging.getLogger("statekeeper.app")

#: Standby events the driver keeps (the status document shows the newest 50).
STANDBY_EVENTS_KEPT = 500


class ExecutorReports:
    """The executors' reports of one app run, as the driver keeps them."""

    def __init__(
        self,
        acceptable_recovery_lag: int,
        on_endpoint: Callable[[ExecutorEndpoint], Any],
        live_executors: Callable[[], set[str] | None],
    ) -> None:
        """``on_endpoint``: gets each executor's query endpoint (placement puts them into the
        next assignment); ``live_executors()``: the executors alive at the last placement
        (None before the first)."""
        self._on_endpoint = on_endpoint
        self._live_executors = live_executors
        self.acceptable_recovery_lag = acceptable_recovery_lag
        self._last_ran: dict[str, str] = {}  # task -> executor of its last run (this app run)
        self.restores: Counter[tuple[str, str]] = Counter()  # (cause, source) -> count
        self.restored_records: Counter[str] = Counter()  # cause -> records replayed
        self.stale_copies = 0
        self.fenced: Counter[tuple[str, str]] = Counter()  # (task, kind) -> records fenced
        self.standby_fenced: dict[tuple[str, str], int] = {}  # (executor, task) -> fenced
        self.recent_stale: list[dict[str, str]] = []
        self.reports: dict[str, dict[str, Any]] = {}
        self._event_listeners: list[Any] = []
        # Batch loads (hundreds a second while a copy catches up) and the rare starts and
        # suspensions are kept apart, so the loads never push the others out.
        self.standby_loads: list[dict[str, Any]] = []
        self.standby_events: list[dict[str, Any]] = []
        self.standby_event_counts: Counter[str] = Counter()
        self._seen_seq: dict[str, int] = {}  # recorder stream -> newest event seq replayed

    def note_results(self, results: list[TaskRunResult]) -> None:
        """Task moves the executors saw, and every cold open's restores by cause."""
        for result in results:
            for kind, count in result.fenced.items():
                self.fenced[(result.task_id, kind)] += count
            previous = self._last_ran.get(result.task_id)
            executor = result.executor_id or DRIVER_EXECUTOR_ID
            self._last_ran[result.task_id] = executor
            if result.warm or not result.restored:
                continue
            cause = "start" if previous is None else "moved" if previous != executor else "reopened"
            for restore in result.restored:
                self.restores[(cause, str(restore.get("source", "?")))] += 1
                self.restored_records[cause] += int(restore.get("records") or 0)
            if cause == "moved":
                log.info(
                    "task %s moved from executor %s to %s: restored %s",
                    result.task_id,
                    previous,
                    executor,
                    [(r.get("store"), r.get("source"), r.get("records")) for r in result.restored],
                )

    def note_stale(self, closed: list[StaleCopyClosed]) -> None:
        """Copies of moved tasks that workers closed without a commit."""
        for item in closed:
            self.stale_copies += 1
            self.recent_stale.append(
                {"task": item.task, "executor": item.executor_id, "reason": item.reason}
            )
        del self.recent_stale[:-20]

    def note_reports(self, reports: list[ExecutorReport]) -> None:
        """Executors' services reports: query endpoints go into the next assignment; standby
        events go to the app's standby listeners."""
        for item in reports:
            self.reports[item.executor_id] = item.report
            for task, standby in (item.report.get("standbys") or {}).items():
                fenced = standby.get("fenced") if isinstance(standby, dict) else None
                if fenced:  # cumulative per standby copy: the newest report counts
                    self.standby_fenced[(item.executor_id, task)] = int(
                        fenced.get("records", 0)
                    ) + int(fenced.get("markers", 0))
            query = item.report.get("query") or {}
            if query.get("port") is not None:
                self._on_endpoint(
                    ExecutorEndpoint(
                        item.executor_id, query.get("host") or item.host, int(query["port"])
                    )
                )
            events = (item.report.get("standbys") or {}).get("events") or []
            for event in events:
                key = (str(event.get("stream")), int(event.get("seq", -1)))
                if self._seen_seq.get(key[0], -1) >= key[1]:
                    continue  # seen in an earlier report
                self._seen_seq[key[0]] = key[1]
                event = {**event, "executor": item.executor_id}
                kept = (
                    self.standby_loads
                    if event.get("event") == "batch_loaded"
                    else self.standby_events
                )
                kept.append(event)
                self.standby_event_counts[str(event.get("event"))] += 1
                del kept[:-STANDBY_EVENTS_KEPT]
                for listener in self._event_listeners:
                    try:
                        replay_event(event, listener)
                    except Exception:  # a listener's failure must not stop processing
                        log.exception("standby listener %r failed on %s", listener, event)

    def add_standby_listener(self, listener: Any) -> None:
        """A :class:`~statekeeper.standby.listener.StandbyUpdateListener` (or anything with
        its methods): called on the driver with the events executors report."""
        self._event_listeners.append(listener)

    def _live_reports(self) -> dict[str, dict[str, Any]]:
        """Reports of the executors alive at the last placement (a lost executor's last
        report would show standbys that are gone)."""
        alive = self._live_executors()
        if alive is None:
            alive = set(self.reports)
        return {e: r for e, r in self.reports.items() if e in alive}

    def caught_up_standbys(self) -> dict[str, set[str]]:
        """Per task, the live executors whose standby copy is running and at most
        ``acceptable_recovery_lag`` changelog records behind (Kafka Streams' name)."""
        out: dict[str, set[str]] = {}
        for task, copies in self.standby_lag().items():
            for executor, info in copies.items():
                raw = info.get("lag")
                lags = list(raw.values()) if isinstance(raw, dict) else [raw]
                if (
                    info.get("state") == "running"
                    and lags
                    and all(n is not None for n in lags)
                    and sum(lags) <= self.acceptable_recovery_lag
                ):
                    out.setdefault(task, set()).add(executor)
        return out

    def standby_lag(self) -> dict[str, dict[str, Any]]:
        """Per task, the standby copies' lag by executor (executors report with the results
        of each batch's Spark tasks, so an idle app shows the figures of its last batch)."""
        out: dict[str, dict[str, Any]] = {}
        for executor, report in sorted(self._live_reports().items()):
            for task, info in (report.get("standbys") or {}).items():
                if task != "events" and isinstance(info, dict):
                    out.setdefault(task, {})[executor] = {
                        k: info.get(k)
                        for k in ("state", "lag", "applied_offsets", "updated", "error")
                    }
        return out

    def _recent_standby_events(self) -> list[dict[str, Any]]:
        """The newest 30 start/suspend events and the newest 20 batch loads (batch loads are
        far more frequent and would hide the others), oldest first."""
        loads = self.standby_loads[-20:]
        others = self.standby_events[-30:]
        return sorted(loads + others, key=lambda e: e.get("time", 0))

    def fencing_status(self) -> dict[str, Any]:
        """For the status document: what fencing stopped (docs/fencing.md); placement adds
        the results it dropped."""
        by_task: dict[str, dict[str, int]] = {}
        by_kind: Counter[str] = Counter()
        fenced = Counter(self.fenced)
        for (_executor, task), n in self.standby_fenced.items():
            fenced[(task, "standby changelog records")] += n
        for (task, kind), n in sorted(fenced.items()):
            by_task.setdefault(task, {})[kind] = n
            by_kind[kind] += n
        return {
            "fenced_total": sum(by_kind.values()),
            "by_kind": dict(by_kind),
            "by_task": by_task,
        }

    def status(self) -> dict[str, Any]:
        """For the status document's ``placement`` section, beside placement's own."""
        return {
            "restores": [
                {"cause": cause, "source": source, "count": n}
                for (cause, source), n in sorted(self.restores.items())
            ],
            "restored_records": dict(self.restored_records),
            "stale_copies_closed": self.stale_copies,
            "recent_stale_copies": list(self.recent_stale),
            "standby_lag": self.standby_lag(),
            "standby_events": self._recent_standby_events(),
            "standby_event_counts": dict(self.standby_event_counts),
            "executor_reports": {
                e: {k: v for k, v in r.items() if k != "standbys"}
                for e, r in self._live_reports().items()
            },
        }
