"""A detached app process: its identity, whether it still runs, and stopping it.

The identity holds the launched process's :class:`~statekeeper.process_identity.
ProcessIdentity` (pid, start time and boot id), so a pid the kernel reused for another
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
from dataclasses import dataclass, field
from pathlib import Path

from statekeeper.airflow.supervision.stops import (
    CALLER_RELAUNCHES,
    IntendedStop,
    intended_stop_of,
    record_intended_stop,
)
from statekeeper.process_identity import HoldsProcessIdentity, Liveness, ProcessIdentity
from statekeeper.procfs import group_members


@dataclass(frozen=True)
class AppProcessIdentity(HoldsProcessIdentity):
    """One launch of an app: enough to find it again from another task or DAG run. Its JSON
    (:meth:`to_json`) is flat: ``pid``, ``start_ticks`` and ``boot_id`` beside the rest."""

    application_id: str
    process: ProcessIdentity
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
        """The launch of ``pid``, just started on this machine."""
        return cls(
            application_id,
            ProcessIdentity.of(pid),
            socket.gethostname(),
            launched_at,
            log_path,
            status_file,
            list(command),
            upgrade_mode,
        )

    @property
    def local(self) -> bool:
        """Whether this machine launched it, on this boot (its pid means something here)."""
        return self.host == socket.gethostname() and self.process.local

    def alive(self) -> tuple[bool | None, str]:
        """``(running?, why)``; None when the process is on another host or machine boot."""
        if not self.local:
            boot = self.process.boot_id[:8]
            return None, f"launched on {self.host} (boot {boot}), checked elsewhere"
        found = self.process.liveness()
        if found is Liveness.ZOMBIE:
            _reap(self.pid)
        return found is Liveness.RUNNING, f"pid {self.pid} {found.value}"

    @property
    def app_dir(self) -> Path:
        """The folder of the app's status file, where its intended stops are written."""
        return Path(self.status_file).parent

    def intended_stop(self) -> IntendedStop | None:
        """The record saying this launch was stopped on purpose, if there is one."""
        return intended_stop_of(self.app_dir, self.pid, self.process.start_ticks)

    def group_may_be_signalled(self) -> bool:
        """The process group may be signalled: launched here, its leader ours or gone (see
        :meth:`~statekeeper.process_identity.ProcessIdentity.group_may_be_signalled`)."""
        return self.local and self.process.group_may_be_signalled()


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
    start = identity.process.start_ticks
    record_intended_stop(identity.app_dir, identity.pid, start, by=by, then=then)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if wait_group_gone(identity, timeout_s):
        return StopResult("graceful", name, time.monotonic() - started)
    kill_group(identity)
    wait_group_gone(identity, 30.0)
    return StopResult("killed", name, time.monotonic() - started)
