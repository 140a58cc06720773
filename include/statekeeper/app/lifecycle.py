"""App lifecycle states and listeners, mirroring Kafka Streams' ``KafkaStreams.State``."""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable

from statekeeper.errors import StatekeeperError

log = logging.getLogger("statekeeper.app")


class AppState(enum.Enum):
    """Where an app is in its life (R5, docs/invariants.md)."""

    CREATED = "CREATED"
    REBALANCING = "REBALANCING"  # checking topics, planning tasks, starting Spark
    RESTORING = "RESTORING"  # the first micro-batch: tasks open and restore their stores
    # RUNNING is also reached straight from REBALANCING, as in Kafka Streams when nothing
    # needs restoring: a started app whose sources hold nothing past what it processed
    # (see settle_idle_start) runs no micro-batch until input comes, and is not starting.
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"  # stop asked: finishing the current batch
    NOT_RUNNING = "NOT_RUNNING"
    ERROR = "ERROR"


_ALLOWED: dict[AppState, set[AppState]] = {
    AppState.CREATED: {AppState.REBALANCING, AppState.PENDING_SHUTDOWN, AppState.ERROR},
    AppState.REBALANCING: {
        AppState.RESTORING,
        AppState.RUNNING,
        AppState.PENDING_SHUTDOWN,
        AppState.ERROR,
    },
    AppState.RESTORING: {AppState.RUNNING, AppState.PENDING_SHUTDOWN, AppState.ERROR},
    AppState.RUNNING: {AppState.RESTORING, AppState.PENDING_SHUTDOWN, AppState.ERROR},
    AppState.PENDING_SHUTDOWN: {AppState.NOT_RUNNING, AppState.ERROR},
    AppState.NOT_RUNNING: set(),
    AppState.ERROR: {AppState.PENDING_SHUTDOWN, AppState.NOT_RUNNING},
}

StateListener = Callable[[AppState, AppState], None]
"""Called as ``listener(new_state, old_state)`` after every transition."""


class AppStateMachine:
    """Thread-safe state holder that enforces the allowed transitions and notifies listeners."""

    def __init__(self, listeners: list[StateListener] | None = None) -> None:
        self._state = AppState.CREATED
        self._lock = threading.Lock()
        self._listeners = list(listeners or [])
        self.error: str | None = None

    @property
    def state(self) -> AppState:
        return self._state

    def add_listener(self, listener: StateListener) -> None:
        self._listeners.append(listener)

    def transition(self, new: AppState, *, error: str | None = None) -> None:
        self._transition(None, new, error)

    def transition_from(self, expected: AppState, new: AppState) -> bool:
        """Move to ``new`` only if the state is still ``expected`` (checked and changed at
        once: another thread may move the app meanwhile); returns whether it moved."""
        return self._transition(expected, new, None)

    def _transition(self, expected: AppState | None, new: AppState, error: str | None) -> bool:
        with self._lock:
            old = self._state
            if expected is not None and old is not expected:
                return False
            if new == old:
                return False
            if new not in _ALLOWED[old]:
                raise StatekeeperError(f"invalid app state transition {old.value} -> {new.value}")
            self._state = new
            if error is not None:
                self.error = error
        log.info("app state %s -> %s", old.value, new.value)
        for listener in self._listeners:
            try:
                listener(new, old)
            except Exception:  # a listener must not break the app
                log.exception("state listener %r failed", listener)
        return True


def settle_idle_start(machine: AppStateMachine, *, query_started: bool, caught_up: bool) -> bool:
    """REBALANCING → RUNNING for a start with nothing to process: the streaming query runs
    and every source partition's end is at the position the app processed up to (so Spark
    will run no micro-batch until input comes, and RESTORING — the first batch — would wait
    for it). Returns whether the app is RUNNING now. Called by the driver's supervise loop
    after it refreshed its end offsets; a no-op in any other state."""
    if query_started and caught_up:
        machine.transition_from(AppState.REBALANCING, AppState.RUNNING)
    return machine.state is AppState.RUNNING
