"""Adaptive micro-batches: how many source records the next micro-batch may admit.

Spark's fixed cost per micro-batch (planning, one job, the tasks' launch and commit; ~0.3 s
on 2 cores) dominates small batches, and a large batch costs latency when the app is caught
up only if a burst fills it. So the limit follows the backlog:

- **Under backlog** (the last batch was full): the next batch gets what the last one's rate
  processes in ``batch_target_ms``, at most 4× the last limit per step and never below half
  of it (one slow batch does not collapse the size).
- **Caught up** (the last batch was not full): the limit decays by half per batch, not
  below twice what the batch held, so a steady input rate keeps its headroom and a burst
  after a quiet spell is cut into short batches.
- **Bounds**: never below ``min_records_per_batch``, never above ``max_records_per_batch``
  (the ceiling) nor the memory bound: ``batch_memory_mb`` over the bytes a record takes in a
  Python worker while a batch holds it (its payload, sampled by the tasks, plus the
  message object's own size).

With ``adaptive_batches`` off every batch may admit ``max_records_per_batch``, as before.
Pure decisions; the driver applies them (:mod:`statekeeper.spark.batch_limit`).
"""

from __future__ import annotations

from dataclasses import dataclass

from statekeeper.settings import StatekeeperSettings

#: What a consumed record costs in a Python worker beyond its key and value: the
#: confluent-kafka Message object, its list slot and the topic string's reference.
RECORD_OVERHEAD_BYTES = 200
#: The largest step up, and down under backlog, from one batch to the next.
GROWTH = 4
SHRINK = 2


@dataclass
class BatchSizing:
    """The next micro-batch's record limit, from how the last one went (module docstring)."""

    ceiling: int
    floor: int
    target_s: float
    memory_bytes: int
    adaptive: bool = True
    #: The limit the next batch is planned with.
    limit: int = 0
    #: The payload bytes per record the tasks sampled last (None: not known yet).
    record_bytes: float | None = None

    def __post_init__(self) -> None:
        self.floor = min(self.floor, self.ceiling)  # a ceiling below the floor wins
        if self.limit <= 0:
            self.limit = self.floor if self.adaptive else self.ceiling

    @classmethod
    def from_settings(cls, s: StatekeeperSettings) -> BatchSizing:
        """From the app's settings (``max_records_per_batch``, ``min_records_per_batch``,
        ``batch_target_ms``, ``batch_memory_mb``, ``adaptive_batches``)."""
        return cls(
            ceiling=s.max_records_per_batch,
            floor=s.min_records_per_batch,
            target_s=s.batch_target_ms / 1000.0,
            memory_bytes=s.batch_memory_mb * 1024 * 1024,
            adaptive=s.adaptive_batches,
        )

    @property
    def memory_cap(self) -> int | None:
        """The most records a batch may hold within ``memory_bytes`` (None: record size not
        sampled yet)."""
        if self.record_bytes is None:
            return None
        return max(1, int(self.memory_bytes / (self.record_bytes + RECORD_OVERHEAD_BYTES)))

    def upper(self) -> int:
        """The highest limit allowed now: the ceiling, or the memory bound when lower (the
        floor still wins over both in :meth:`after_batch`)."""
        cap = self.memory_cap
        return self.ceiling if cap is None else min(self.ceiling, cap)

    def after_batch(self, records: int, seconds: float, record_bytes: float | None = None) -> int:
        """Take in a finished batch (``records`` admitted source records, planned under
        ``self.limit``, processed in ``seconds``; ``record_bytes``: the tasks' sampled
        payload per record) and return the next batch's limit (also ``self.limit``)."""
        if record_bytes is not None:
            self.record_bytes = record_bytes
        if not self.adaptive:
            self.limit = self.ceiling
            return self.limit
        last = self.limit
        if records >= last:  # full: a backlog is waiting
            rate = records / max(seconds, 1e-3)
            wanted = int(rate * self.target_s)
            proposed = min(max(wanted, last // SHRINK), last * GROWTH)
        else:  # caught up
            proposed = max(last // SHRINK, 2 * records)
            proposed = min(proposed, last)
        self.limit = max(self.floor, min(proposed, self.upper()))
        return self.limit

    def report(self) -> dict[str, object]:
        """For the status: the next batch's limit and its bounds."""
        return {
            "adaptive": self.adaptive,
            "next_limit": self.limit,
            "floor": self.floor,
            "ceiling": self.ceiling,
            "memory_cap": self.memory_cap,
            "record_bytes_sampled": None
            if self.record_bytes is None
            else round(self.record_bytes, 1),
            "target_ms": round(self.target_s * 1000),
        }
