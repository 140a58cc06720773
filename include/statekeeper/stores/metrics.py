"""Per-store operation counters and latencies (the metered layer fills them)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OperationStats:
    """Count and total latency of one operation kind."""

    count: int = 0
    total_ns: int = 0
    max_ns: int = 0

    def record(self, elapsed_ns: int, n: int = 1) -> None:
        self.count += n
        self.total_ns += elapsed_ns
        if elapsed_ns > self.max_ns:
            self.max_ns = elapsed_ns

    def as_dict(self) -> dict[str, float]:
        return {
            "count": self.count,
            "avg_latency_us": (self.total_ns / self.count / 1000) if self.count else 0.0,
            "max_latency_us": self.max_ns / 1000,
        }


@dataclass
class StoreMetrics:
    """Operation stats of one store, keyed by operation name (put, get, delete, range, ...)."""

    store: str
    operations: dict[str, OperationStats] = field(default_factory=dict)

    def op(self, name: str) -> OperationStats:
        stats = self.operations.get(name)
        if stats is None:
            stats = self.operations[name] = OperationStats()
        return stats

    def as_dict(self) -> dict[str, object]:
        return {
            "store": self.store,
            "operations": {name: s.as_dict() for name, s in sorted(self.operations.items())},
        }

    def drain(self) -> dict[str, dict[str, int]]:
        """The raw stats since the last drain (``count``, ``total_ns``, ``max_ns`` per
        operation), then start over: a task reports these deltas with each run, and the
        driver sums them, so counts survive the task moving to another worker."""
        raw = {
            name: {"count": s.count, "total_ns": s.total_ns, "max_ns": s.max_ns}
            for name, s in sorted(self.operations.items())
            if s.count
        }
        self.operations.clear()
        return raw
