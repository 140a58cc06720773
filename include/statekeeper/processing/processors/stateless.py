"""Stateless KStream operations: map, map_values, filter, filter_not, flat_map,
flat_map_values, select_key, peek — record at a time and on whole column batches.

Function signatures follow Kafka Streams: ``fn(key, value)`` for map / filter / flat_map /
select_key / peek, ``fn(value)`` for map_values / flat_map_values.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import compress
from typing import Any

from statekeeper.processing.column_batch import (
    FAILED,
    ColumnBatchEnv,
    Columns,
    drop_rows,
    guarded_map,
    unpack_pairs,
)
from statekeeper.processing.errors import TopologyError
from statekeeper.processing.nodes import Op
from statekeeper.processing.processor import Processor, ProcessorContext, Record

KINDS = {
    "map": "KSTREAM-MAP",
    "map_values": "KSTREAM-MAPVALUES",
    "filter": "KSTREAM-FILTER",
    "filter_not": "KSTREAM-FILTER",
    "flat_map": "KSTREAM-FLATMAP",
    "flat_map_values": "KSTREAM-FLATMAPVALUES",
    "select_key": "KSTREAM-KEY-SELECT",
    "peek": "KSTREAM-PEEK",
}


class StatelessOp(Op):
    """One stateless stream operation (``kind`` in :data:`KINDS`)."""

    batch_role = "stateless"

    def __init__(self, kind: str, fn: Callable[..., Any]) -> None:
        if kind not in KINDS:
            raise TopologyError(f"unknown stateless op {kind!r}")
        if not callable(fn):
            raise TopologyError(f"{kind}(): expected a function, got {type(fn).__name__}")
        self.op = kind
        self.kind = KINDS[kind]
        self.fn = fn

    def create(self) -> Processor:
        return _PROCESSORS[self.op](self.fn)

    # -- batch path ------------------------------------------------------------------------

    def apply_batch(self, cols: Columns, env: ColumnBatchEnv) -> Columns:
        if not cols.keys:
            return cols
        fn, op, keys, values = self.fn, self.op, cols.keys, cols.values
        if op == "map_values":
            out, failures = guarded_map(fn, values)
            if not failures:
                return Columns(keys, out, cols.src)
            (keys, out), src = drop_rows(cols, failures, env, keys, out)
            return Columns(keys, out, src)
        if op in ("select_key", "peek"):
            out, failures = guarded_map(fn, keys, values)
            new_keys = out if op == "select_key" else keys
            if not failures:
                return Columns(new_keys, values, cols.src)
            (new_keys, values), src = drop_rows(cols, failures, env, new_keys, values)
            return Columns(new_keys, values, src)
        if op in ("filter", "filter_not"):
            out, failures = guarded_map(fn, keys, values)
            want = op == "filter"
            keep = [r is not FAILED and bool(r) is want for r in out]
            for row, exc in failures:
                env.reject(cols.sources()[row], exc)
            return Columns(
                list(compress(keys, keep)),
                list(compress(values, keep)),
                list(compress(cols.sources(), keep)),
            )
        if op == "map":
            out, failures = guarded_map(fn, keys, values)
            src: list[int] | range = cols.sources()
            if failures:
                (out,), src = drop_rows(cols, failures, env, out)
            new_keys, new_values, src = unpack_pairs(out, src, env)
            return Columns(new_keys, new_values, list(src))
        # flat_map / flat_map_values: materialise each row's results inside the guard
        if op == "flat_map":
            lists, failures = guarded_map(lambda k, v: list(fn(k, v)), keys, values)
        else:
            lists, failures = guarded_map(lambda v: list(fn(v)), values)
        src = cols.sources()
        if failures:
            (keys, lists), src = drop_rows(cols, failures, env, keys, lists)
        rows_src = [i for i, rows in zip(src, lists, strict=True) for _ in rows]
        if op == "flat_map_values":
            return Columns(
                [k for k, rows in zip(keys, lists, strict=True) for _ in rows],
                [v for rows in lists for v in rows],
                rows_src,
            )
        new_keys, new_values, kept = unpack_pairs(
            [kv for rows in lists for kv in rows], rows_src, env
        )
        return Columns(new_keys, new_values, list(kept))


class _Stateless(Processor):
    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.forward = context.forward


class _Map(_Stateless):
    def process(self, record: Record) -> None:
        key, value = self.fn(record.key, record.value)
        self.forward(Record(key, value, record.timestamp, record.headers))


class _MapValues(_Stateless):
    def process(self, record: Record) -> None:
        self.forward(Record(record.key, self.fn(record.value), record.timestamp, record.headers))


class _Filter(_Stateless):
    def process(self, record: Record) -> None:
        if self.fn(record.key, record.value):
            self.forward(record)


class _FilterNot(_Stateless):
    def process(self, record: Record) -> None:
        if not self.fn(record.key, record.value):
            self.forward(record)


class _FlatMap(_Stateless):
    def process(self, record: Record) -> None:
        ts, headers = record.timestamp, record.headers
        for key, value in list(self.fn(record.key, record.value)):
            self.forward(Record(key, value, ts, headers))


class _FlatMapValues(_Stateless):
    def process(self, record: Record) -> None:
        key, ts, headers = record.key, record.timestamp, record.headers
        for value in list(self.fn(record.value)):
            self.forward(Record(key, value, ts, headers))


class _SelectKey(_Stateless):
    def process(self, record: Record) -> None:
        key = self.fn(record.key, record.value)
        self.forward(Record(key, record.value, record.timestamp, record.headers))


class _Peek(_Stateless):
    def process(self, record: Record) -> None:
        self.fn(record.key, record.value)
        self.forward(record)


_PROCESSORS: dict[str, type[_Stateless]] = {
    "map": _Map,
    "map_values": _MapValues,
    "filter": _Filter,
    "filter_not": _FilterNot,
    "flat_map": _FlatMap,
    "flat_map_values": _FlatMapValues,
    "select_key": _SelectKey,
    "peek": _Peek,
}
