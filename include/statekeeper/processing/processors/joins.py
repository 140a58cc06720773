"""Joins on co-partitioned inputs: KStream-KTable (a lookup in the table's store when the
stream record is processed) and KTable-KTable (each side's update looks up the other side's
store; both results meet in a merge node).

Joiners get ``(left_value, right_value)``; a left join passes None for a missing right side.
Stream-table: records without a match are dropped by ``join`` and forwarded by
``left_join``. Table-table: a missing side (or a tombstone) yields a tombstone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statekeeper.processing.nodes import Op
from statekeeper.processing.processor import Processor, ProcessorContext, Record
from statekeeper.processing.processors.aggregate import check_key

Joiner = Callable[[Any, Any], Any]


class StreamTableJoinOp(Op):
    """KStream ⋈ KTable: look up the stream key in the table store ``table_store``."""

    def __init__(self, table_store: str, joiner: Joiner, left: bool) -> None:
        self.table_store = table_store
        self.joiner = joiner
        self.left = left
        self.kind = "KSTREAM-LEFTJOIN" if left else "KSTREAM-JOIN"

    def create(self) -> Processor:
        return _StreamTableJoin(self)


class _StreamTableJoin(Processor):
    def __init__(self, op: StreamTableJoinOp) -> None:
        self.op = op

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.table = context.get_state_store(self.op.table_store)

    def process(self, record: Record) -> None:
        check_key(record.key, "a stream-table join")
        other = self.table.get(record.key)
        if other is None and not self.op.left:
            return
        joined = self.op.joiner(record.value, other)
        self.context.forward(Record(record.key, joined, record.timestamp, record.headers))


class TableTableJoinOp(Op):
    """One side of KTable ⋈ KTable: an update of this side joined with the other's store."""

    def __init__(self, other_store: str, joiner: Joiner, *, this_is_left: bool, left: bool):
        self.other_store = other_store
        self.joiner = joiner
        self.this_is_left = this_is_left
        self.left = left  # left join (else inner)
        self.kind = "KTABLE-JOINTHIS" if this_is_left else "KTABLE-JOINOTHER"

    def create(self) -> Processor:
        return _TableTableJoin(self)

    def join(self, value: Any, other: Any) -> Any:
        lv, rv = (value, other) if self.this_is_left else (other, value)
        if lv is None or (rv is None and not self.left):
            return None
        return self.joiner(lv, rv)


class _TableTableJoin(Processor):
    def __init__(self, op: TableTableJoinOp) -> None:
        self.op = op

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.other = context.get_state_store(self.op.other_store)

    def process(self, record: Record) -> None:
        check_key(record.key, "a table-table join")
        joined = self.op.join(record.value, self.other.get(record.key))
        self.context.forward(Record(record.key, joined, record.timestamp, record.headers))
