"""Punctuation schedules of a task, with deterministic, persisted next-fire times.

As in Kafka Streams, a stream-time schedule is aligned to multiples of its interval and
fires as soon as stream time reaches the next one; a wall-clock schedule first fires one
interval after the batch time it was created in. After firing at time ``now`` the next time
is the first multiple of the interval (counted from the last fire time) after ``now`` —
missed intervals are skipped, not replayed. Wall-clock time is the micro-batch time, so a
re-run batch fires exactly the same punctuations (invariant 2, docs/invariants.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statekeeper.processing.processor import Cancellable, PunctuationType, Punctuator

Runner = Callable[[Any, Punctuator, int], None]  # (node, callback, timestamp)


class PunctuationSchedule(Cancellable):
    """One scheduled callback; ``key`` (``<node>#<n>``) identifies it across restarts."""

    def __init__(
        self,
        key: str,
        node: Any,
        interval_ms: int,
        kind: PunctuationType,
        callback: Punctuator,
        next_time: int | None,
    ) -> None:
        self.key = key
        self.node = node
        self.interval_ms = interval_ms
        self.kind = kind
        self.callback = callback
        self.next_time = next_time  # None: wall clock, anchored at the first batch time
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def advance(self, now: int) -> None:
        assert self.next_time is not None
        missed = (now - self.next_time) // self.interval_ms
        self.next_time += (missed + 1) * self.interval_ms


class Punctuations:
    """All schedules of a task; ``persisted`` maps schedule keys to next-fire times."""

    def __init__(self, persisted: dict[str, int]) -> None:
        self._persisted = persisted
        self._schedules: list[PunctuationSchedule] = []
        self._per_node: dict[str, int] = {}

    def __bool__(self) -> bool:
        return bool(self._schedules)

    def add(
        self, node: Any, interval_ms: int, kind: PunctuationType, callback: Punctuator
    ) -> PunctuationSchedule:
        if not isinstance(interval_ms, int) or interval_ms < 1:
            raise ValueError(f"punctuation interval must be an int >= 1 ms, got {interval_ms!r}")
        if not isinstance(kind, PunctuationType):
            raise TypeError(f"punctuation type must be a PunctuationType, got {kind!r}")
        n = self._per_node.get(node.name, 0)
        self._per_node[node.name] = n + 1
        key = f"{node.name}#{n}"
        next_time = self._persisted.get(key)
        if next_time is None and kind is PunctuationType.STREAM_TIME:
            next_time = 0
        schedule = PunctuationSchedule(key, node, interval_ms, kind, callback, next_time)
        self._schedules.append(schedule)
        return schedule

    def fire(self, kind: PunctuationType, now: int, run: Runner) -> int:
        """Run every due schedule of ``kind`` (earliest first); returns how many fired."""
        fired = 0
        while True:
            due = [
                s
                for s in self._schedules
                if s.kind is kind
                and not s.cancelled
                and s.next_time is not None
                and s.next_time <= now
            ]
            if not due:
                return fired
            schedule = min(due, key=lambda s: s.next_time)  # type: ignore[arg-type,return-value]
            schedule.advance(now)
            run(schedule.node, schedule.callback, now)
            fired += 1

    def anchor_wall_clock(self, now: int) -> None:
        """Give new wall-clock schedules their first fire time (one interval from ``now``)."""
        for s in self._schedules:
            if s.next_time is None:
                s.next_time = now + s.interval_ms

    def next_times(self) -> dict[str, int]:
        """What to persist: next-fire times of live, anchored schedules."""
        return {
            s.key: s.next_time
            for s in self._schedules
            if not s.cancelled and s.next_time is not None
        }
