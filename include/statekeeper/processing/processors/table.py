"""KTable operations: materialise (table source, to_table), map_values, filter, to_stream.

A table record is an upsert; a None value is a tombstone (the key is deleted from the
table's store, and the tombstone is forwarded). ``map_values`` keeps tombstones and turns a
None result into one; ``filter`` forwards a tombstone for a rejected row, as Kafka Streams
does, so downstream tables drop the key too. Ops without a store also run in the vectorised
fast path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from statekeeper.processing.column_batch import ColumnBatchEnv, Columns, drop_rows, guarded_map
from statekeeper.processing.nodes import BatchRole, Op
from statekeeper.processing.processor import Processor, ProcessorContext, Record
from statekeeper.processing.processors.aggregate import check_key


class MaterializeOp(Op):
    """Write each record into the key-value store ``store`` and forward it."""

    def __init__(self, store: str, kind: str = "KTABLE-SOURCE") -> None:
        self.store = store
        self.kind = kind

    def create(self) -> Processor:
        return _Materialize(self.store)


class _Materialize(Processor):
    def __init__(self, store: str) -> None:
        self.store_name = store

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        check_key(record.key, "a table")
        self.store.put(record.key, record.value)
        self.context.forward(record)


class TableOp(Op):
    """map_values / filter / filter_not / to_stream on a table, optionally materialised."""

    KINDS = {
        "map_values": "KTABLE-MAPVALUES",
        "filter": "KTABLE-FILTER",
        "filter_not": "KTABLE-FILTER",
        "to_stream": "KTABLE-TOSTREAM",
    }

    def __init__(self, op: str, fn: Callable[..., Any] | None, store: str | None = None) -> None:
        if op not in self.KINDS:
            raise ValueError(f"unknown table op {op!r}")
        self.op = op
        self.kind = self.KINDS[op]
        self.fn = fn
        self.store = store

    @property
    def batch_role(self) -> BatchRole:  # type: ignore[override]
        return "stateless" if self.store is None else None

    def create(self) -> Processor:
        return _TableProcessor(self)

    def transform(self, key: Any, value: Any) -> Any:
        op, fn = self.op, self.fn
        if op == "to_stream":
            return value
        if value is None:
            return None
        if op == "map_values":
            return fn(value)  # type: ignore[misc]
        keep = bool(fn(key, value))  # type: ignore[misc]
        return value if keep == (op == "filter") else None

    def apply_batch(self, cols: Columns, env: ColumnBatchEnv) -> Columns:
        if self.op == "to_stream" or not cols.keys:
            return cols
        values, failures = guarded_map(self.transform, cols.keys, cols.values)
        if not failures:
            return Columns(cols.keys, values, cols.src)
        (keys, values), src = drop_rows(cols, failures, env, cols.keys, values)
        return Columns(keys, values, src)


class _TableProcessor(Processor):
    def __init__(self, op: TableOp) -> None:
        self.transform = op.transform
        self.store_name = op.store
        self.store: Any = None

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        if self.store_name is not None:
            self.store = context.get_state_store(self.store_name)

    def process(self, record: Record) -> None:
        value = self.transform(record.key, record.value)
        if self.store is not None:
            check_key(record.key, "a table")
            self.store.put(record.key, value)
        self.context.forward(Record(record.key, value, record.timestamp, record.headers))
