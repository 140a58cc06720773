"""What ``/proc`` says of a process: its state, parent, process group and start time.

A pid alone does not name a process: the kernel reuses pids. The start time (field 22 of
``/proc/<pid>/stat``, clock ticks since boot) does, on one boot: records of the processes
this library starts hold a :class:`~statekeeper.process_identity.ProcessIdentity` (pid,
start ticks, boot id) and never signal a pid whose start time differs. Linux only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
_GONE = ("Z", "X")  # zombie, dead: exited, whatever holds the pid


@dataclass(frozen=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` used here."""

    state: str
    parent: int
    group: int
    start_ticks: int

    @property
    def running(self) -> bool:
        """Not exited (a zombie has exited; only its parent's wait() is missing)."""
        return self.state not in _GONE


def proc_stat(pid: int) -> ProcStat | None:
    """``pid``'s stat, or None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    return ProcStat(fields[0], int(fields[1]), int(fields[2]), int(fields[19]))


def start_ticks(pid: int) -> int | None:
    """Start time of a running (non-zombie) ``pid``; None if it is gone."""
    stat = proc_stat(pid)
    return stat.start_ticks if stat is not None and stat.running else None


def start_epoch(pid: int) -> float | None:
    """When a running ``pid`` started, in epoch seconds (boot time + its start ticks); None
    if it is gone or the boot time is unknown."""
    ticks = start_ticks(pid)
    if ticks is None:
        return None
    try:
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def parent_pid(pid: int) -> int | None:
    """The parent of ``pid`` (None if gone)."""
    stat = proc_stat(pid)
    return None if stat is None else stat.parent


def process_group(pid: int) -> int | None:
    """The process group of ``pid`` (None if gone)."""
    stat = proc_stat(pid)
    return None if stat is None else stat.group


def all_pids() -> list[int]:
    """Every pid in this pid namespace."""
    return [int(entry.name) for entry in Path("/proc").iterdir() if entry.name.isdigit()]


def group_members(pgid: int) -> list[int]:
    """Running (non-zombie) processes of process group ``pgid``."""
    members = []
    for pid in all_pids():
        stat = proc_stat(pid)
        if stat is not None and stat.group == pgid and stat.running:
            members.append(pid)
    return members


def boot_id() -> str:
    """This machine's boot id ('' where unknown): start ticks compare only within a boot."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""
