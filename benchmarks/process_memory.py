"""Peak resident memory of a benchmark's processes, by role, from /proc (Linux).

Every process below the benchmark (the driver's Python itself, Spark's JVM, the PySpark
daemon and its Python workers, each executor's service process, the embedded broker, helper
processes) reports ``VmHWM``, the kernel's high-water mark of its resident set since it
started. Read at the end of a contender, it is that process's peak so far; a Python worker
Spark reused across contenders carries the largest one's peak.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text()
            kids += [int(k) for k in text.split()]
    except OSError:
        pass
    return kids


def descendants(root: int) -> list[int]:
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo += _children(pid)
    return seen


def _peak_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def role_of(pid: int, root: int) -> str:
    if pid == root:
        return "driver_python"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "other"
    if "java" in cmd.split(" ")[0]:
        return "spark_jvm"
    if "pyspark.daemon" in cmd or "pyspark/daemon" in cmd:
        return "python_workers"
    if "tansu" in cmd:
        return "broker"
    if "statekeeper.worker.service_process" in cmd:
        return "executor_services"
    if "pyspark.worker" in cmd or "pyspark/worker" in cmd:
        return "python_workers"
    return "other"


def peak_rss_by_role(root: int | None = None) -> dict[str, Any]:
    """Per role, the processes' count, their largest peak and the sum of their peaks (MiB)."""
    root = os.getpid() if root is None else root
    out: dict[str, Any] = {}
    for pid in descendants(root):
        peak = _peak_kib(pid)
        if peak is None:
            continue
        role = out.setdefault(role_of(pid, root), {"processes": 0, "max_mib": 0.0, "sum_mib": 0.0})
        role["processes"] += 1
        role["max_mib"] = round(max(role["max_mib"], peak / 1024), 1)
        role["sum_mib"] = round(role["sum_mib"] + peak / 1024, 1)
    return out
