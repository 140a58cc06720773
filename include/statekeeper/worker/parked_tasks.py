"""Task states a worker process keeps open between micro-batches ("parked").

Kafka Streams keeps a task's stores open for as long as the task stays assigned. On Spark a
task may run in a different Python worker every batch, so each batch used to reopen its
stores and re-check the changelog tail. A parked task keeps its lock and open stores after
its commit; when its next batch lands in the same worker it continues at once: nobody else
can have written its changelog, because nobody else could take the lock.

Anyone else who needs the task (the other worker, a store reader, a snapshot) waits on the
lock and leaves a release request (:class:`~statekeeper.state.directory.TaskLock`); a
watcher thread here closes the parked task and releases the lock within a poll interval.
A parked task may hold uncommitted batches (a commit interval spans batches): the watcher
commits them first when the worker is idle; a busy worker closes without committing (two
busy workers waiting on each other's tasks would deadlock) and the next holder replays
them. A killed worker's locks are released by the OS, so parking never blocks recovery.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class ParkedTask:
    """A parked task's open state and its source fetch, which keeps reading ahead from where
    the last batch ended (a RangeFetch with ``continuous=True``, or None)."""

    __slots__ = ("state", "fetch", "epoch", "still_placed_here")

    def __init__(
        self,
        state: Any,
        fetch: Any | None,
        epoch: int = 0,
        still_placed_here: Callable[[], bool] | None = None,
    ) -> None:
        self.state = state
        self.fetch = fetch
        # The task's placement epoch when it ran here, and a check that the driver still
        # places it here under that epoch (statekeeper.placement.registry): a copy of a task
        # that moved away is stale and must never commit.
        self.epoch = epoch
        self.still_placed_here = still_placed_here

    @property
    def task_id(self) -> str:
        return str(getattr(self.state, "task_id", "?"))

    @property
    def specs(self) -> list[Any]:
        return list(self.state.specs)

    def release_requested(self) -> bool:
        return bool(self.state.release_requested())

    def commit_held(self) -> None:
        """Commit the batches the task holds uncommitted (it is being handed over), unless
        the task has moved away since it ran here: then they are dropped (its new executor
        has replayed or will replay them from the changelog and the driver's backlog)."""
        if self.still_placed_here is not None and not self.still_placed_here():
            log.warning("task %s moved away: its held batches are dropped here", self.task_id)
            return
        transaction = self.state.pending_transaction()
        if transaction is not None:
            transaction.commit()

    def close(self) -> None:
        """Close the fetch and the task (stores, lock); the task closes even when closing
        the fetch fails, and that failure is logged rather than raised over the task's."""
        try:
            if self.fetch is not None:
                self.fetch.close()
        except Exception:
            log.exception("task %s: closing its fetch failed", self.task_id)
        finally:
            self.state.close()


class ParkedTasks:
    """Open tasks of this process (:class:`ParkedTask` or anything with ``specs``,
    ``release_requested()`` and ``close()``), by task directory, with a release watcher."""

    def __init__(
        self,
        poll_s: float = 0.01,
        *,
        commit_before_release: Callable[[Any], None] | None = None,
        busy: threading.Lock | None = None,
    ) -> None:
        self._poll_s = poll_s
        self._commit = commit_before_release
        self._busy = busy
        self._parked: dict[str, Any] = {}  # task dir -> open task (lock held)
        self._lock = threading.Lock()
        self._watcher: threading.Thread | None = None
        self._stop_watcher = threading.Event()

    def take(self, task_dir: str, specs: list[Any]) -> Any | None:
        """The parked state of ``task_dir`` (now the caller's), or None. A state parked with
        other store specs (a changed topology) is closed instead."""
        with self._lock:
            state = self._parked.pop(task_dir, None)
        if state is not None and state.specs != list(specs):
            state.close()
            return None
        return state

    def park(self, task_dir: str, state: Any) -> None:
        """Keep ``state`` (committed, lock held) open for this task's next batch."""
        with self._lock:
            previous = self._parked.pop(task_dir, None)
            self._parked[task_dir] = state
            if self._watcher is None:
                self._stop_watcher = threading.Event()
                self._watcher = threading.Thread(
                    target=self._watch,
                    args=(self._stop_watcher,),
                    name="statekeeper-parked-tasks",
                    daemon=True,
                )
                self._watcher.start()
        if previous is not None and previous is not state:
            previous.close()

    def close_all(self) -> None:
        """Close every parked task (uncommitted batches are replayed by the next holder) and
        stop the watcher, which would otherwise keep this object and its clients alive; the
        next :meth:`park` starts a new one."""
        with self._lock:
            states, self._parked = list(self._parked.values()), {}
            self._watcher = None
            self._stop_watcher.set()
        for state in states:
            _close(state)

    def __len__(self) -> int:
        return len(self._parked)

    def _watch(self, stop: threading.Event) -> None:
        while not stop.wait(self._poll_s):
            with self._lock:
                wanted = [d for d, s in self._parked.items() if s.release_requested()]
                released = [self._parked.pop(d) for d in wanted]
            for state in released:
                self._commit_if_idle(state)
                _close(state)

    def _commit_if_idle(self, state: Any) -> None:
        if self._commit is None or self._busy is None or not self._busy.acquire(blocking=False):
            return
        try:
            self._commit(state)
        except Exception:  # the next holder replays what was not committed
            log.exception("committing handed-over task %s failed", getattr(state, "task_id", "?"))
        finally:
            self._busy.release()


def _close(state: Any) -> None:
    try:
        state.close()
    except Exception:  # a failed close must not kill the watcher; the lock is freed anyway
        log.exception("closing parked task %s failed", getattr(state, "task_id", "?"))
