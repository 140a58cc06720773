"""An in-memory stand-in for Spark's offset log and commit log (the planner's BatchLog)."""

from __future__ import annotations

from statekeeper.kafka.model import OffsetRange

#: Subtopology of each test topic: ``a`` and ``a2`` are co-partitioned inputs of subtopology 0
#: (one task reads both), ``b`` feeds subtopology 1.
SUBTOPOLOGY = {"a": 0, "a2": 0, "b": 1}


def batch_time(batch_id: int) -> int:
    """The trigger time the fake log records for a batch (distinct per batch)."""
    return 1_700_000_000_000 + 500 * batch_id


class MemoryBatchLog:
    """Batches as Spark logs them: ranges and time before a batch runs, a commit after.

    Like Spark's log, it cannot give batch 0's ranges (their start is not logged)."""

    def __init__(self) -> None:
        self.logged: dict[int, list[OffsetRange]] = {}
        self.commits: set[int] = set()
        self.reads: list[int] = []  # batch ids whose ranges were asked for

    def log(self, batch_id: int, ranges: list[OffsetRange]) -> None:
        self.logged[batch_id] = list(ranges)

    def commit(self, batch_id: int) -> None:
        self.commits.add(batch_id)

    def ranges(self, batch_id: int) -> list[OffsetRange] | None:
        self.reads.append(batch_id)
        if batch_id <= 0:
            return None
        return self.logged.get(batch_id)

    def batch_time_ms(self, batch_id: int) -> int:
        return batch_time(batch_id)

    def last_committed_batch(self) -> int | None:
        return max(self.commits, default=None)
