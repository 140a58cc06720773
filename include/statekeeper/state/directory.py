"""State directory layout and the per-task lock (invariant 6, docs/invariants.md).

``<state_dir>/<application_id>/<task_id>/`` holds ``.lock``, ``.checkpoint``,
``rocksdb/<store>/`` and, while somebody waits for a held lock, ``.release``: the request
that a holder keeping the task open between batches (a parked task) gives it up.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time
from pathlib import Path

from statekeeper.errors import TaskLockedError


class TaskDirectory:
    """Paths of one task's local state."""

    def __init__(self, state_dir: Path, application_id: str, task_id: str) -> None:
        self.application_id = application_id
        self.task_id = task_id
        self.path = Path(state_dir) / application_id / task_id

    @property
    def lock_file(self) -> Path:
        return self.path / ".lock"

    @property
    def release_request_file(self) -> Path:
        return self.path / ".release"

    @property
    def checkpoint_file(self) -> Path:
        return self.path / ".checkpoint"

    def store_path(self, store: str) -> Path:
        return self.path / "rocksdb" / store


class TaskLock:
    """An exclusive fcntl lock on the task's ``.lock`` file, holding the owner's PID.

    The OS releases it when the process dies, even on ``kill -9``, so a crashed owner never
    blocks a restart. A waiter leaves a release request (``.release``) so that a holder
    that merely keeps the task open between batches lets it go
    (:class:`statekeeper.worker.parked_tasks.ParkedTasks`).
    """

    def __init__(self, directory: TaskDirectory, timeout_s: float) -> None:
        self.directory = directory
        self.timeout_s = timeout_s
        self._fd: int | None = None

    def acquire(self) -> None:
        fd, holder = self._flock(self.timeout_s, ask_holder=True)
        if fd is None:
            raise TaskLockedError(
                f"task {self.directory.task_id} of {self.directory.application_id} is "
                f"locked by PID {holder} ({self.directory.lock_file}); waited "
                f"{self.timeout_s:.0f} s. Stop that process or point this one at another "
                "state_dir."
            )
        self._own(fd)

    def try_acquire(self, wait_s: float) -> bool:
        """Take the lock if it frees within ``wait_s``; never leave a release request.

        For a holder that yields to everyone (a standby replica): asking a parked active
        task to let go would steal its task. Returns whether the lock is now held."""
        if self._fd is not None:
            return True
        fd, _holder = self._flock(wait_s, ask_holder=False)
        if fd is None:
            return False
        self._own(fd)
        return True

    def _flock(self, wait_s: float, *, ask_holder: bool) -> tuple[int | None, str]:
        """Wait up to ``wait_s`` for the lock: its file descriptor, or None and the holder's
        PID. ``ask_holder`` leaves a release request while waiting."""
        path = self.directory.lock_file
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd, ""
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    os.close(fd)
                    raise
                if ask_holder:
                    # Kept present while waiting: another waiter that got the lock first
                    # removes it, and the next holder must still see that somebody waits.
                    request = self.directory.release_request_file
                    if not request.exists():
                        request.touch()
                if time.monotonic() >= deadline:
                    holder = _read_holder(fd)
                    os.close(fd)
                    return None, holder
                time.sleep(0.01)

    def _own(self, fd: int) -> None:
        # Any request is answered now (also a stale one whose waiter gave up); a waiter
        # still queued renews it.
        self.directory.release_request_file.unlink(missing_ok=True)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def held_elsewhere(self) -> bool:
        """Whether another lock (process or file descriptor) holds the task right now."""
        path = self.directory.lock_file
        if not path.exists():
            return False
        fd = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                return True
            raise
        else:
            fcntl.flock(fd, fcntl.LOCK_UN)
            return False
        finally:
            os.close(fd)

    def release_requested(self) -> bool:
        """Whether another opener waits for this lock."""
        return self.directory.release_request_file.exists()

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> TaskLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_holder(fd: int) -> str:
    try:
        return os.pread(fd, 32, 0).decode().strip() or "unknown"
    except OSError:
        return "unknown"
