"""A running app's per-batch figures: cumulative totals and a fixed window of recent batches.

An app runs for weeks, one micro-batch every few hundred milliseconds: what is kept per
batch is bounded (the last ``window`` batches), so memory and the cost of a status read do
not grow with the number of batches.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict, deque
from typing import Any

from statekeeper.worker.task_run import TaskRun, TaskRunResult

#: Recent batches kept for the status page's median and for readers of ``recent``.
DEFAULT_WINDOW = 1_000

#: Result counters summed over the app's run.
TOTALS = (
    "records_processed",
    "records_skipped",
    "records_late_dropped",
    "records_dlq",
    "records_output",
    "records_replayed",
)


class BatchStats:
    """Totals since the app started and the last ``window`` batches' figures."""

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        #: One entry per completed micro-batch, the last ``window`` of them, oldest first.
        self.recent: deque[dict[str, Any]] = deque(maxlen=window)
        self._seconds: deque[float] = deque(maxlen=window)
        self.totals: dict[str, int] = defaultdict(int)
        self.batch_count = 0
        self.processing_s = 0.0

    @property
    def window(self) -> int:
        return self.recent.maxlen or 0

    @property
    def seconds_window(self) -> int:
        """How many batch durations the median is currently taken over."""
        return len(self._seconds)

    def record(
        self,
        batch_id: int,
        runs: list[TaskRun],
        results: list[TaskRunResult],
        seconds: float,
    ) -> dict[str, Any]:
        """Count a completed batch; returns its entry (as kept in ``recent``)."""
        for result in results:
            for key in TOTALS:
                self.totals[key] += getattr(result, key)
        records = sum(r.records_processed for r in results)
        self._seconds.append(seconds)
        self.batch_count += 1
        self.processing_s += seconds
        entry = {
            "batch_id": batch_id,
            "tasks": len(runs),
            # Tasks that were still open in the worker that ran them (no reopen); a cold task
            # after the first batch means Spark moved it to another Python worker.
            "warm_tasks": sum(1 for r in results if r.warm),
            "records": records,
            "seconds": round(seconds, 4),
            "records_per_s": round(records / seconds, 1) if seconds > 0 else None,
            "finished_at": time.time(),
        }
        self.recent.append(entry)
        return entry

    def throughput(self) -> dict[str, Any]:
        """The status page's throughput: batches and records since start, the median batch
        time over the recent window."""
        total = self.totals.get("records_processed", 0)
        secs = self._seconds
        return {
            "batches": self.batch_count,
            "records_processed": total,
            "records_per_s_processing": round(total / self.processing_s, 1)
            if self.processing_s
            else None,
            "batch_seconds_p50": round(statistics.median(secs), 4) if secs else None,
            "batch_seconds_sum": round(self.processing_s, 4),
        }
