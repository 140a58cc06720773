"""Background processes tracked by PID files: start detached, check, stop, and sweep.

Each service runs in its own session (``setsid``), so its process group holds the service and
every child it forks without a new session of its own. The PID file (JSON) records the
process's identity (pid, start time and boot: a reused pid is never taken for it, see
:mod:`statekeeper.process_identity`), the command line, the port and the log. A child that
does start its own session (a detached ``spark-submit``) is still found: every process the
platform starts carries the marker variable :data:`MARKER_ENV` in its environment, which
children inherit.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.atomic_file import replace_text
from statekeeper.process_identity import HoldsProcessIdentity, ProcessIdentity
from statekeeper.procfs import all_pids, group_members, parent_pid, start_ticks

#: Environment variable naming the platform root; inherited by every process it starts.
MARKER_ENV = "STATEKEEPER_PLATFORM"


@dataclass
class ProcessRecord(HoldsProcessIdentity):
    """What a PID file records about one started service."""

    name: str
    process: ProcessIdentity
    argv: list[str]
    log: str
    started_at: float
    port: int | None = None

    @classmethod
    def read(cls, path: Path) -> ProcessRecord | None:
        """The record in ``path``, or None when there is none (or it is unreadable)."""
        try:
            return cls.from_json(json.loads(path.read_text()))
        except (FileNotFoundError, ValueError, TypeError, KeyError):
            return None

    def write(self, path: Path) -> None:
        """Write atomically, so a concurrent ``status`` never reads half a file."""
        replace_text(path, json.dumps(self.to_json(), indent=2) + "\n")

    def alive(self) -> bool:
        """True while the recorded process (not a later one with its pid) runs."""
        return self.process.alive()


def start_process(
    name: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    log: Path,
    pid_file: Path,
    cwd: Path,
    port: int | None = None,
) -> ProcessRecord:
    """Start ``argv`` in a new session with output appended to ``log``; record it in
    ``pid_file``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )
    record = ProcessRecord(
        name=name,
        process=ProcessIdentity.of(proc.pid),
        argv=list(argv),
        log=str(log),
        started_at=time.time(),
        port=port,
    )
    record.write(pid_file)
    return record


def exited_early(record: ProcessRecord) -> bool:
    """True if the process is gone (reaps it when it is our child)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(record.pid, os.WNOHANG)
    return not record.alive()


def stop_process(record: ProcessRecord, timeout_s: float = 20.0) -> list[int]:
    """SIGTERM the service's process group, wait up to ``timeout_s``, then SIGKILL what is
    left (what is left of the group when the service itself is gone; nothing when its pid
    now belongs to another process). Returns the pids that had to be killed."""
    if not record.alive():
        orphans = group_members(record.pid) if record.process.group_may_be_signalled() else []
        return stop_pids(orphans, timeout_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(record.pid, signal.SIGTERM)
    return _wait_then_kill(lambda: group_members(record.pid), timeout_s, record.pid)


def stop_pids(pids: Iterable[int], timeout_s: float) -> list[int]:
    """SIGTERM ``pids``, wait up to ``timeout_s``, SIGKILL the rest; returns the killed."""
    found = [ProcessIdentity.of(pid) for pid in pids]
    for process in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(process.pid, signal.SIGTERM)

    def left() -> list[int]:
        return [process.pid for process in found if process.alive()]

    return _wait_then_kill(left, timeout_s)


def _wait_then_kill(left: Any, timeout_s: float, group: int | None = None) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid in left():  # reap our own children so they do not linger as zombies
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
        if not left():
            return []
        time.sleep(0.1)
    killed = left()
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for pid in killed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    for pid in killed:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
    return killed


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return b""


def processes_of(root: Path) -> list[int]:
    """Live processes of the platform at ``root``: its marker in their environment, ``root``
    in their command line, or their working directory inside ``root``. Never this process
    or its ancestors."""
    root_s = str(root.resolve())
    marker = f"{MARKER_ENV}={root_s}".encode() + b"\0"
    spared = _ancestors(os.getpid())
    found = []
    for pid in all_pids():
        if pid in spared or start_ticks(pid) is None:
            continue
        environ = _read(Path(f"/proc/{pid}/environ")) + b"\0"
        cmdline = _read(Path(f"/proc/{pid}/cmdline")).decode(errors="replace")
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if (
            (b"\0" + marker) in (b"\0" + environ)
            or root_s in cmdline
            or cwd == root_s
            or cwd.startswith(root_s + "/")
        ):
            found.append(pid)
    return found


def _ancestors(pid: int) -> set[int]:
    seen = {pid}
    while pid > 1:
        parent = parent_pid(pid)
        if parent is None:
            break
        pid = parent
        seen.add(pid)
    return seen


def sweep(root: Path, timeout_s: float = 20.0) -> list[int]:
    """Stop every remaining process of the platform at ``root`` (SIGTERM, wait, SIGKILL);
    returns the pids found."""
    found = processes_of(root)
    if found:
        stop_pids(found, timeout_s)
    return found
