"""CPU time of a benchmark's processes, by role, between two moments, from /proc (Linux).

A snapshot maps each process below the benchmark to its role (the roles of
:mod:`process_memory`) and the CPU it has used so far (user + system, all threads).
:func:`cores_by_role` turns two snapshots into the cores each role kept busy in between:
it shows which process a window's time went to (the app's Python workers, the embedded
broker, the executor's service process, the benchmark's own clients).
"""

from __future__ import annotations

import os
from pathlib import Path

from process_memory import descendants, role_of  # this script's folder is on sys.path

_TICKS = os.sysconf("SC_CLK_TCK")

#: pid -> (role, CPU seconds so far)
Snapshot = dict[int, tuple[str, float]]


def cpu_snapshot(root: int | None = None) -> Snapshot:
    root = os.getpid() if root is None else root
    out: Snapshot = {}
    for pid in descendants(root):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = (role_of(pid, root), (int(fields[11]) + int(fields[12])) / _TICKS)
    return out


def cores_by_role(before: Snapshot, after: Snapshot, seconds: float) -> dict[str, float]:
    """Cores each role kept busy between the snapshots (a process started in between counts
    from its start; one that ended in between is not counted)."""
    busy: dict[str, float] = {}
    for pid, (role, cpu) in after.items():
        earlier = before.get(pid)
        used = cpu - earlier[1] if earlier is not None else cpu
        busy[role] = busy.get(role, 0.0) + max(used, 0.0)
    return {role: round(used / seconds, 2) for role, used in sorted(busy.items())}
