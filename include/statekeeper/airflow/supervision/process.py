"""A detached app process: its identity, whether it still runs, and stopping it.

The identity is the launched process's pid *and* its start time (``/proc/<pid>/stat`` field
22, clock ticks since boot) plus the boot id, so a pid the kernel reused for another
process is never taken for the app (nor signalled). The launched process leads its own
session and process group (``start_new_session``): the group holds the Spark JVM, the
Python driver and the Python workers, so one ``killpg`` takes down all of them.

A graceful stop first writes down that it was intended (:mod:`.stops`, beside the app's
status file), so whoever finds the process gone later does not take it for a crash.

Linux only (``/proc``); from another host (``host`` differs) the process cannot be checked
and callers get ``None``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.airflow.supervision.stops import (
    CALLER_RELAUNCHES,
    IntendedStop,
    intended_stop_of,
    record_intended_stop,
)
from statekeeper.procfs import boot_id, group_members, proc_stat


@dataclass(frozen=True)
class AppProcessIdentity:
    """One launch of an app: enough to find it again from another task or DAG run."""

    application_id: str
    pid: int
    start_ticks: int
    boot_id: str
    host: str
    launched_at: float
    log_path: str
    status_file: str
    command: list[str] = field(default_factory=list)
    upgrade_mode: str | None = None

    @classmethod
    def of_launched(
        cls, application_id: str, pid: int, launched_at: float, log_path: str, status_file: str,
        command: list[str], upgrade_mode: str | None = None,
    ) -> AppProcessIdentity:  # fmt: skip
        stat = proc_stat(pid)
        return cls(
            application_id,
            pid,
            stat.start_ticks if stat else -1,
            boot_id(),
            socket.gethostname(),
            launched_at,
            log_path,
            status_file,
            list(command),
            upgrade_mode,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> AppProcessIdentity:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in doc.items() if k in known})

    @property
    def local(self) -> bool:
        """Whether this machine launched it (its pid means something here)."""
        return self.host == socket.gethostname() and self.boot_id == boot_id()

    def alive(self) -> tuple[bool | None, str]:
        """``(running?, why)``; None when the process is on another host or machine boot."""
        if not self.local:
            return None, f"launched on {self.host} (boot {self.boot_id[:8]}), checked elsewhere"
        stat = proc_stat(self.pid)
        if stat is None:
            return False, f"pid {self.pid} exited"
        if stat.start_ticks != self.start_ticks:
            return False, f"pid {self.pid} exited (the pid now belongs to another process)"
        if not stat.running:
            _reap(self.pid)
            return False, f"pid {self.pid} exited (zombie)"
        return True, f"pid {self.pid} running (state {stat.state})"

    @property
    def app_dir(self) -> Path:
        """The folder of the app's status file, where its intended stops are written."""
        return Path(self.status_file).parent

    def intended_stop(self) -> IntendedStop | None:
        """The record saying this launch was stopped on purpose, if there is one."""
        return intended_stop_of(self.app_dir, self.pid, self.start_ticks)

    def group_may_be_signalled(self) -> bool:
        """The process group may be signalled: its leader is ours or gone. A pid is never
        reused while a process group of that id has members, so a gone leader's group is
        still ours; a leader pid that now belongs to another process is not."""
        stat = proc_stat(self.pid)
        return self.local and (stat is None or stat.start_ticks == self.start_ticks)


def _reap(pid: int) -> None:
    """Collect the exit status of ``pid`` if it is this process's child (no zombie left)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def kill_group(identity: AppProcessIdentity, sig: int = signal.SIGKILL) -> bool:
    """Send ``sig`` to the app's whole process group; False when nothing was signalled."""
    if not identity.group_may_be_signalled():
        return False
    try:
        os.killpg(identity.pid, sig)
    except ProcessLookupError:
        return False
    _reap(identity.pid)
    return True


def wait_group_gone(identity: AppProcessIdentity, timeout_s: float, poll_s: float = 0.2) -> bool:
    """Wait until no live process of the app's group is left; False on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        _reap(identity.pid)
        if not group_members(identity.pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)


@dataclass(frozen=True)
class StopResult:
    """How a stop went: ``graceful`` (exited after SIGTERM), ``killed`` (kill -9 after the
    timeout), or ``not_running``; ``signalled`` names the process that got SIGTERM."""

    outcome: str
    signalled: str
    seconds: float


def stop_app(
    identity: AppProcessIdentity,
    timeout_s: float,
    *,
    target: str = "spark-submit",
    driver_pid: int | None = None,
    by: str = "a graceful stop",
    then: str = CALLER_RELAUNCHES,
) -> StopResult:
    """Stop gracefully: write down the intended stop (``by``, ``then``: see
    :mod:`~statekeeper.airflow.supervision.stops`), SIGTERM, wait up to ``timeout_s`` for
    the whole group to exit, then kill -9 the group. Whoever finds the process gone later
    (a watch, the next reconcile) reads the record and does not take the exit for a crash.

    ``target`` "spark-submit": SIGTERM to the launched process (the driver JVM), whose stop
    hook (statekeeper.spark.jvm_shutdown) has the Python driver finish the running batch,
    commit and stop its query before Spark shuts down. "driver": SIGTERM to the Python
    driver (``driver_pid``, from the app's status; it must be in the app's group), whose own
    handler does the same, after which the JVM exits by itself.
    """
    started = time.monotonic()
    alive, _ = identity.alive()
    if not alive and not (identity.group_may_be_signalled() and group_members(identity.pid)):
        return StopResult("not_running", "", 0.0)
    pid, name = identity.pid, f"spark-submit (pid {identity.pid})"
    if target == "driver":
        if not driver_pid or driver_pid not in group_members(identity.pid):
            raise ValueError(
                f"stop target 'driver': the Python driver pid {driver_pid} is not in the app's "
                f"process group {identity.pid}"
            )
        pid, name = driver_pid, f"the Python driver (pid {driver_pid})"
    record_intended_stop(identity.app_dir, identity.pid, identity.start_ticks, by=by, then=then)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_group_gone(identity, timeout_s):
        return StopResult("graceful", name, time.monotonic() - started)
    kill_group(identity)
    wait_group_gone(identity, 30.0)
    return StopResult("killed", name, time.monotonic() - started)
