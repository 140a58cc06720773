"""Which Spark executor this process belongs to, and where its state lives.

On a cluster every executor has its own disk, so a task's state is only where the task last
ran. Spark tells a Python worker nothing about its executor; the executor JVM is the Python
daemon's parent and was started with ``--executor-id N`` (in local mode the parent is the
driver JVM: executor ``driver``). The state directory can differ per executor: the worker's
environment variable :data:`EXECUTOR_STATE_DIR_ENV` (set on the Spark worker, inherited by
its executors and their Python workers) wins over the driver's ``state_dir`` setting.
"""

from __future__ import annotations

import functools
import itertools
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from statekeeper.procfs import parent_pid

#: Set on a Spark worker (or executor, ``spark.executorEnv.``) to give its executors their own
#: state directory, as separate hosts have.
EXECUTOR_STATE_DIR_ENV = "STATEKEEPER_EXECUTOR_STATE_DIR"
DRIVER_EXECUTOR_ID = "driver"


@dataclass(frozen=True)
class ExecutorIdentity:
    """One Spark executor: Spark's executor id, the host it runs on and its JVM's pid."""

    executor_id: str
    host: str
    jvm_pid: int

    @property
    def name(self) -> str:
        """Spark's executor id: the key placement decisions use."""
        return self.executor_id


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return []


def _ancestors(pid: int, max_depth: int) -> Iterator[int]:
    """``pid`` and up to ``max_depth - 1`` of its ancestors, nearest first (init excluded)."""
    current: int | None = pid
    for _ in range(max_depth):
        if current is None or current <= 1:
            return
        yield current
        current = parent_pid(current)


def executor_of_process(pid: int, max_depth: int = 6) -> ExecutorIdentity:
    """The executor ``pid`` runs under: the first ancestor JVM started with
    ``--executor-id``, else the driver (local mode, or the driver itself; its ``jvm_pid``
    is 0: see :func:`java_ancestor`)."""
    host = socket.gethostname()
    for current in _ancestors(pid, max_depth):
        args = _cmdline(current)
        if "--executor-id" in args:
            at = args.index("--executor-id")
            if at + 1 < len(args):
                if "--hostname" in args and args.index("--hostname") + 1 < len(args):
                    host = args[args.index("--hostname") + 1]
                return ExecutorIdentity(args[at + 1], host, current)
    return ExecutorIdentity(DRIVER_EXECUTOR_ID, host, 0)


def java_ancestor(pid: int, max_depth: int = 6) -> int | None:
    """The nearest ancestor of ``pid`` running Java (in local mode a Python worker's is the
    driver's JVM); None when there is none."""
    for current in itertools.islice(_ancestors(pid, max_depth), 1, None):
        try:
            if Path(f"/proc/{current}/comm").read_text().strip() == "java":
                return current
        except OSError:
            return None
    return None


@functools.lru_cache(maxsize=1)
def current_executor() -> ExecutorIdentity:
    """This process's executor (cached: a Python worker never changes executor)."""
    return executor_of_process(os.getpid())


def executor_state_dir(default: Path) -> Path:
    """The state directory of this process's executor: the executor's environment first
    (:data:`EXECUTOR_STATE_DIR_ENV`), else ``default`` (the settings' ``state_dir``)."""
    override = os.environ.get(EXECUTOR_STATE_DIR_ENV)
    return Path(override) if override else Path(default)


def executor_dir(state_dir: Path, application_id: str) -> Path:
    """The folder an executor host keeps for an app beside its task directories: the
    driver's assignment as published there, the services' report, share claims."""
    return Path(state_dir) / application_id / ".executor"
