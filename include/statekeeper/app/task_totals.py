"""Per-task figures summed over an app's run: commits and the metered stores' operations.

Task results carry what one run did (its commit time when it committed, its stores'
operation counts and latencies since its last report); the driver sums them here so the
status document (``tasks.<id>.commits``, ``tasks.<id>.store_operations``) and ``/metrics``
show totals since the app started, whichever worker ran each task.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from typing import Any

from statekeeper.worker.task_run import TaskRunResult


class TaskTotals:
    """Thread-safe sums per task: ``commits`` (count, seconds_sum, last_seconds) and
    ``store_operations`` (store -> operation -> count, total_ns, max_ns)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._commits: dict[str, dict[str, float]] = {}
        self._ops: dict[str, dict[str, dict[str, dict[str, int]]]] = defaultdict(dict)

    def add(self, result: TaskRunResult) -> None:
        """Count one task run's result."""
        with self._lock:
            if result.commit_ran:
                seconds = float(result.seconds.get("commit", 0.0))
                commits = self._commits.setdefault(
                    result.task_id, {"count": 0, "seconds_sum": 0.0, "last_seconds": 0.0}
                )
                commits["count"] += 1
                commits["seconds_sum"] = round(commits["seconds_sum"] + seconds, 6)
                commits["last_seconds"] = seconds
            stores = self._ops[result.task_id]
            for store, operations in result.store_operations.items():
                for op, stats in operations.items():
                    total = stores.setdefault(store, {}).setdefault(
                        op, {"count": 0, "total_ns": 0, "max_ns": 0}
                    )
                    total["count"] += int(stats.get("count", 0))
                    total["total_ns"] += int(stats.get("total_ns", 0))
                    total["max_ns"] = max(total["max_ns"], int(stats.get("max_ns", 0)))

    def task(self, task_id: str) -> dict[str, Any]:
        """The task's totals, as the status document shows them (copies)."""
        with self._lock:
            out: dict[str, Any] = {}
            if task_id in self._commits:
                out["commits"] = dict(self._commits[task_id])
            if self._ops.get(task_id):
                out["store_operations"] = {
                    store: {op: dict(stats) for op, stats in ops.items()}
                    for store, ops in self._ops[task_id].items()
                }
            return out
