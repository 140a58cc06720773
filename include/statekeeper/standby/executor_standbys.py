"""The executor's standby replicas: one updater thread keeping every standby task of this
executor warm (an executor-services component: ``reconcile``, ``report``, ``close``).

``reconcile(assignment)`` says which tasks this executor keeps standbys of
(:meth:`Assignment.standby_tasks_of`); the updater thread applies it between steps: a task
that became active here is suspended as ``PROMOTED`` (its copy stays on disk for the active
open to take over), a task no longer assigned here as ``MIGRATED``, a new one starts. Every
``interval_s`` the thread runs one update step per task (:class:`StandbyTask`); in between it
polls the tasks' release requests every 20 ms, so an active task opening here waits about
that long for the standby's lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from statekeeper.cluster.executor import ExecutorIdentity
from statekeeper.errors import StatekeeperError
from statekeeper.kafka.adapter import consumer_config
from statekeeper.placement.assignment import Assignment
from statekeeper.settings import StatekeeperSettings
from statekeeper.standby.listener import (
    CompositeStandbyUpdateListener,
    RecordingStandbyListener,
    StandbyUpdateListener,
    SuspendReason,
)
from statekeeper.standby.standby_task import (
    StandbyTask,
    StandbyUnavailableError,
    StoreInstaller,
    UpdateResult,
    standby_specs,
)
from statekeeper.state.task_id import TaskId
from statekeeper.stores.builders import AnyStore, StoreSpec

log = logging.getLogger("statekeeper.standby")

#: Seconds between two update steps of a task.
DEFAULT_INTERVAL_S = 0.25
#: How often held locks are checked for release requests between steps.
RELEASE_POLL_S = 0.02
#: Events the executor report carries (the newest; the driver dedupes by stream and seq).
REPORT_EVENTS = 200
#: Retry delays after a failed step: doubling from the first to the last.
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0


class StoreSpecSource(Protocol):
    """Where the component gets a task's stores: the app's topology."""

    def store_specs(self, subtopology_id: int) -> list[StoreSpec]: ...


class _Entry:
    """A task the component keeps a standby of (or tried to)."""

    def __init__(self, task: StandbyTask | None) -> None:
        self.task = task
        self.state = "running"  # running | suspended | failed
        self.error: str | None = None
        self.reason: SuspendReason | None = None
        self.failures = 0
        self.retry_at = 0.0
        self.last_status: dict[str, Any] = {}


def report_events(events: list[dict[str, Any]], most: int) -> list[dict[str, Any]]:
    """At most ``most`` events in ``seq`` order: the newest half of the batch loads and every
    start and suspension that fits (batch loads outnumber them by far, and a reader that
    skips events older than the newest it saw must get the rare ones in the same report)."""
    rare = [e for e in events if e["event"] != "batch_loaded"][-(most // 2) :]
    loads = [e for e in events if e["event"] == "batch_loaded"][-(most - len(rare)) :]
    return sorted(rare + loads, key=lambda e: e["seq"])


class StandbyReplicas:
    """Standby copies of this executor's standby tasks (see the module docstring).

    Args:
        settings: the app's settings (application id, bootstrap servers, broker timeout).
        state_dir: this executor's state directory (copies go where active tasks would be).
        executor: this executor; its ``executor_id`` is matched against the assignment.
        topology: gives each task's store specs (``store_specs(subtopology_id)``); without
            one every assigned task reports ``failed``.
        listeners: told of standby updates here, in the executor (the driver side replays
            the recorded events instead, see :meth:`report`).
        interval_s: seconds between two update steps of a task.
        installer_for: ``(task_id, partition) -> installer`` putting a store's files in place
            when the copy has none (the newest verified snapshot, e.g.
            :func:`statekeeper.snapshots.install.installer_for` with settings and storage
            bound), so a new standby replays only the changelog after the snapshot.
    """

    def __init__(
        self,
        settings: StatekeeperSettings,
        state_dir: Path,
        executor: ExecutorIdentity,
        topology: StoreSpecSource | None = None,
        *,
        listeners: list[StandbyUpdateListener] | None = None,
        interval_s: float = DEFAULT_INTERVAL_S,
        installer_for: Callable[[str, int], StoreInstaller | None] | None = None,
    ) -> None:
        self.settings = settings
        self.installer_for = installer_for
        self.state_dir = Path(state_dir)
        self.executor = executor
        self.topology = topology
        self.interval_s = interval_s
        self.recorder = RecordingStandbyListener()
        self.listener = CompositeStandbyUpdateListener([self.recorder, *(listeners or [])])
        self._consumer_config = consumer_config(settings.bootstrap_servers)
        self._entries: dict[str, _Entry] = {}
        self._entries_lock = threading.Lock()
        self._pending: tuple[set[str], set[str]] | None = None
        self._pending_lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="statekeeper-standbys", daemon=True)
        self._thread.start()

    # -- the component API -----------------------------------------------------------------

    def reconcile(self, assignment: Assignment) -> None:
        """Follow ``assignment``: the updater thread starts and stops standbys before its
        next step."""
        if assignment.application_id != self.settings.application_id:
            raise StatekeeperError(
                f"assignment of app {assignment.application_id!r} given to the standbys of "
                f"app {self.settings.application_id!r}"
            )
        me = self.executor.executor_id
        active_here = {t for t, p in assignment.tasks.items() if p.active == me}
        wanted = set(assignment.standby_tasks_of(me)) - active_here
        with self._pending_lock:
            self._pending = (wanted, active_here)
        self._wake.set()

    def report(self) -> dict[str, Any]:
        """``{task_id: {"state": "running|suspended|failed", "error", "lag": {store: records},
        "applied_offsets": {store: marker offset}, "updated": epoch s, ...}, "events": [...]}``
        (events: the newest :data:`REPORT_EVENTS` recorded, see
        :class:`~statekeeper.standby.listener.RecordingStandbyListener`)."""
        doc: dict[str, Any] = {}
        with self._entries_lock:
            entries = list(self._entries.items())
        for task_id, entry in entries:
            status = entry.task.status() if entry.task is not None else dict(entry.last_status)
            status.update(
                state=entry.state,
                error=entry.error,
                reason=entry.reason.value if entry.reason else None,
            )
            doc[task_id] = status
        doc["events"] = report_events(self.recorder.events(), REPORT_EVENTS)
        return doc

    def drain_events(self) -> list[dict[str, Any]]:
        """The recorded events, oldest first, removed (for an in-process consumer)."""
        return self.recorder.drain_events()

    def close(self) -> None:
        """Stop the updater; every standby is suspended (``CLOSED``) and its lock freed."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=self.settings.broker_timeout_s + 5)

    def read(
        self, task_id: str, store_name: str, reader: Callable[[AnyStore], Any]
    ) -> tuple[Any, dict[str, Any]]:
        """``reader(store)`` on this executor's standby copy of a task's store, with the
        task's status (``lag``, ``applied_offsets``, ``updated``) at that moment (interactive
        queries). Raises :class:`StandbyUnavailableError` when there is no open copy here."""
        task = self.task(task_id)
        if task is None:
            raise StandbyUnavailableError(
                f"executor {self.executor.executor_id} keeps no standby of task {task_id}"
            )
        value = task.read(store_name, reader)
        return value, task.status()

    def task(self, task_id: str) -> StandbyTask | None:
        """The standby of ``task_id`` (tests, the query server); None when there is none."""
        with self._entries_lock:
            entry = self._entries.get(task_id)
        return entry.task if entry is not None and entry.state != "suspended" else None

    # -- the updater thread ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._apply_pending()
                with self._entries_lock:
                    running = [
                        (t, e)
                        for t, e in self._entries.items()
                        if e.task and e.state != "suspended"
                    ]
                for task_id, entry in running:
                    if self._stop.is_set() or self._pending is not None:
                        break
                    self._step(task_id, entry)
                self._idle(self.interval_s)
        finally:
            with self._entries_lock:
                entries = list(self._entries.values())
            for entry in entries:
                self._suspend(entry, SuspendReason.CLOSED)

    def _apply_pending(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, None
        self._wake.clear()
        if pending is None:
            return
        wanted, active_here = pending
        with self._entries_lock:
            current = dict(self._entries)
        for task_id, entry in current.items():
            if task_id not in wanted and entry.state != "suspended":
                reason = (
                    SuspendReason.PROMOTED if task_id in active_here else SuspendReason.MIGRATED
                )
                self._suspend(entry, reason)
                log.info("standby %s suspended: %s", task_id, reason.value)
        for task_id in sorted(wanted):
            entry = current.get(task_id)
            if entry is not None and entry.state != "suspended":
                continue
            new = self._start(task_id)
            with self._entries_lock:
                self._entries[task_id] = new

    def _start(self, task_id: str) -> _Entry:
        try:
            if self.topology is None:
                raise StatekeeperError(
                    "StandbyReplicas was built without a topology: the stores of task "
                    f"{task_id} are unknown (pass topology=<the app's Topology>)"
                )
            tid = TaskId.parse(task_id)
            sub, partition = tid.subtopology, tid.partition
            specs = standby_specs(self.topology.store_specs(sub))
            if not specs:
                entry = _Entry(None)  # nothing to keep warm: in-memory stores restore fully
                entry.last_status = {"lag": {}, "applied_offsets": {}, "updated": time.time()}
                return entry
            task = StandbyTask(
                application_id=self.settings.application_id,
                task_id=task_id,
                partition=partition,
                specs=specs,
                state_dir=self.state_dir,
                consumer_config=self._consumer_config,
                listener=self.listener,
                timeout_s=self.settings.broker_timeout_s,
                # A long catch-up yields to a new assignment or to close().
                interrupt=lambda: self._stop.is_set() or self._pending is not None,
                installer=self.installer_for(task_id, partition) if self.installer_for else None,
            )
        except Exception as exc:
            log.warning("standby %s cannot start: %s", task_id, exc)
            entry = _Entry(None)
            entry.state, entry.error = "failed", str(exc)
            return entry
        log.info("standby %s started (%s)", task_id, [s.name for s in specs])
        return _Entry(task)

    def _step(self, task_id: str, entry: _Entry) -> None:
        assert entry.task is not None
        if time.monotonic() < entry.retry_at:
            return
        try:
            result = entry.task.update()
        except Exception as exc:
            entry.failures += 1
            delay = min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (entry.failures - 1))
            entry.retry_at = time.monotonic() + delay
            if entry.error != str(exc):
                log.warning("standby %s: update failed (retry in %.0f s): %s", task_id, delay, exc)
            entry.state, entry.error = "failed", str(exc)
            return
        if result is UpdateResult.UPDATED:
            entry.state, entry.error, entry.failures = "running", None, 0

    def _idle(self, seconds: float) -> None:
        """Wait ``seconds`` (less when reconciling or stopping), answering release requests."""
        deadline = time.monotonic() + seconds
        while not self._stop.is_set() and self._pending is None:
            with self._entries_lock:
                held = [e.task for e in self._entries.values() if e.task and e.task.held]
            for task in held:
                task.release_if_requested()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._wake.wait(min(RELEASE_POLL_S, left))

    def _suspend(self, entry: _Entry, reason: SuspendReason) -> None:
        if entry.state == "suspended":
            return
        if entry.task is not None:
            try:
                entry.task.suspend(reason)
            except Exception:
                log.exception("standby %s: suspend failed", entry.task.task_id)
            entry.last_status = entry.task.status()
            entry.task = None
        entry.state, entry.reason, entry.error = "suspended", reason, None
