"""Windowed count / reduce / aggregate into a window store.

A record updates every window containing its timestamp (one for tumbling windows, several
for hopping ones). A window is closed once ``window_end + grace <= stream time`` (the task's
stream time before this record); records for closed windows are dropped and counted as late
(not DLQ'd), as are windows already past the store's retention.
"""

from __future__ import annotations

from statekeeper.processing.nodes import Op
from statekeeper.processing.processor import Processor, ProcessorContext, Record
from statekeeper.processing.processors.aggregate import Aggregation, check_key
from statekeeper.processing.windowed_key import Windowed
from statekeeper.stores.time_windows import TimeWindows


class WindowAggregateOp(Op):
    """Aggregation of a windowed grouped stream into the window store ``store``."""

    kind = "KSTREAM-WINDOWED-AGGREGATE"
    uses_stream_time = True

    def __init__(self, store: str, aggregation: Aggregation, windows: TimeWindows) -> None:
        self.store = store
        self.aggregation = aggregation
        self.windows = windows

    def create(self) -> Processor:
        return _WindowAggregateProcessor(self)


class _WindowAggregateProcessor(Processor):
    def __init__(self, op: WindowAggregateOp) -> None:
        self.op = op
        self.apply = op.aggregation.apply
        self.size = op.windows.size_ms
        self.grace = op.windows.grace_ms
        self.window_starts = op.windows.window_starts

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(self.op.store)
        self.forward = context.forward

    def process(self, record: Record) -> None:
        key, value, ts = record.key, record.value, record.timestamp
        check_key(key, "windowed aggregation")
        context = self.context
        if value is None:
            context.count_dropped()  # type: ignore[attr-defined]
            return
        stream_time = context.stream_time
        late = False
        store = self.store
        for start in self.window_starts(ts):
            end = start + self.size
            if end + self.grace <= stream_time:
                late = True
                continue
            new = self.apply(key, value, store.fetch(key, start))
            if not store.put(key, new, start):  # already past the store's retention
                late = True
                continue
            self.forward(Record(Windowed(key, start, end), new, ts, record.headers))
        if late:
            context.count_late()  # type: ignore[attr-defined]
