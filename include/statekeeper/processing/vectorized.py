"""The batch fast path for linear chains: source → stateless ops → [aggregate → stateless
ops] → [sink], one input partition.

The whole micro-batch moves through the chain as columns (see :mod:`columns`): stateless ops
are list comprehensions, the aggregate folds per key with one ``get_many`` and one
``put_all``, and the sink emits one record per row — one change per distinct key after an
aggregate (like a record cache flushed once per batch). Final state equals record-at-a-time
processing; only the number of intermediate table updates emitted differs.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import compress
from typing import Any

from statekeeper.kafka.consumed_run import (
    key_column,
    max_timestamp,
    timestamp_column,
    value_column,
)
from statekeeper.kafka.model import KafkaRecord
from statekeeper.processing.column_batch import Columns, Failures, guarded_map
from statekeeper.processing.dlq import DESERIALIZATION, classify, is_fatal
from statekeeper.processing.errors import NullKeyError
from statekeeper.processing.nodes import ProcessorNode, SinkNode, SourceNode
from statekeeper.processing.processors.sink import serializer
from statekeeper.processing.task_context import TaskContext
from statekeeper.stores.base import has_none
from statekeeper.stores.serdes import BytesSerde, StringSerde, serde_for


def deserializer(serde: Any) -> Any:
    """``deserialize`` of a serde: None for raw bytes (no call needed), ``bytes.decode``
    for strings (strict UTF-8, like StringSerde)."""
    resolved = serde_for(serde)
    if type(resolved) is BytesSerde:
        return None
    if type(resolved) is StringSerde:
        return bytes.decode
    return resolved.deserialize


def convert(fn: Any, column: list[Any]) -> tuple[list[Any], Failures]:
    """``fn`` over a column of keys or values (None: identity); None entries stay None."""
    if fn is None:
        return column, []
    out, failures = guarded_map(fn, column)
    if has_none(column):  # e.g. JSON would turn a tombstone into b"null"
        for row, x in enumerate(column):
            if x is None:
                out[row] = None
        failures = [(row, exc) for row, exc in failures if column[row] is not None]
    return out, failures


class _Env:
    """ColumnBatchEnv of one run: rejects go to the DLQ and are remembered."""

    def __init__(self, records: Sequence[KafkaRecord], ctx: TaskContext, fail: bool) -> None:
        self.records = records
        self.ctx = ctx
        self.fail = fail
        self.rejected: set[int] = set()

    def reject(self, index: int, exc: BaseException, error_type: str | None = None) -> None:
        if error_type is None and (self.fail or is_fatal(exc)):
            raise exc
        if index not in self.rejected:
            self.rejected.add(index)
            self.ctx.dead_letter(self.records[index], error_type or classify(exc), exc)

    def count_dropped(self, n: int) -> None:
        self.ctx.count_dropped(n)


class VectorizedChain:
    """Runs one subtopology's linear chain over a whole batch."""

    def __init__(
        self,
        chain: list[Any],  # [SourceNode, ProcessorNode..., SinkNode?]
        stores: dict[str, Any],
        ctx: TaskContext,
        fail_on_error: bool,
    ) -> None:
        source = chain[0]
        assert isinstance(source, SourceNode)
        self.ctx = ctx
        self.fail = fail_on_error
        self.key_de = deserializer(source.key_serde)
        self.value_de = deserializer(source.value_serde)
        self.pre: list[Any] = []
        self.post: list[Any] = []
        self.aggregate: Any = None
        self.store: Any = None
        self.sink: SinkNode | None = None
        for node in chain[1:]:
            if isinstance(node, SinkNode):
                self.sink = node
            elif node.op.batch_role == "aggregate":
                assert isinstance(node, ProcessorNode)
                self.aggregate = node.op
                self.store = stores[node.op.store]
            else:
                (self.post if self.aggregate is not None else self.pre).append(node.op)
        # A repartition topic is written by us: when nothing before a count reads values,
        # only their presence matters and decoding them would be wasted work.
        self.decode_values = not (
            source.topics[0].repartition
            and not self.pre
            and self.aggregate is not None
            and self.aggregate.aggregation.kind == "count"
        )
        if self.sink is not None:
            self.sink_topic = self.sink.topic.resolve(ctx.application_id)
            self.key_ser = serializer(self.sink.key_serde)
            self.value_ser = serializer(self.sink.value_serde)

    def run(self, records: Sequence[KafkaRecord]) -> tuple[int, int]:
        """Process ``records`` (one partition, offset order; a ConsumedRun is read as columns,
        without building records); returns (processed, stream time of the valid records or
        -1)."""
        if not records:
            return 0, -1
        env = _Env(records, self.ctx, self.fail)
        cols = self._deserialize(records, env)
        for op in self.pre:
            cols = op.apply_batch(cols, env)
        if self.aggregate is not None:
            emits = bool(self.post) or self.sink is not None
            cols = self.aggregate.aggregate_batch(cols, env, self.store, emits=emits)
        for op in self.post:
            cols = op.apply_batch(cols, env)
        if self.sink is not None:
            self._emit(cols, env)
        if env.rejected:
            timestamps = timestamp_column(records)
            valid = [ts for i, ts in enumerate(timestamps) if i not in env.rejected]
            return len(valid), max(valid, default=-1)
        return len(records), max_timestamp(records)

    def _deserialize(self, records: Sequence[KafkaRecord], env: _Env) -> Columns:
        keys, key_failures = convert(self.key_de, key_column(records))
        value_de = self.value_de if self.decode_values else None
        values, value_failures = convert(value_de, value_column(records))
        failures = key_failures + value_failures
        if not failures:
            return Columns(keys, values, None)
        for row, exc in sorted(failures, key=lambda f: f[0]):
            env.reject(row, exc, DESERIALIZATION)
        bad = {row for row, _ in failures}
        keep = [i not in bad for i in range(len(records))]
        return Columns(
            list(compress(keys, keep)),
            list(compress(values, keep)),
            list(compress(range(len(records)), keep)),
        )

    def _emit(self, cols: Columns, env: _Env) -> None:
        assert self.sink is not None
        if not cols.keys:
            return
        records, topic = env.records, self.sink_topic
        keys, failures = self._serialize(self.key_ser, cols.keys, self.sink.key_required)
        values, value_failures = self._serialize(self.value_ser, cols.values, False)
        src: list[int] | range = cols.sources()
        failures += value_failures
        if failures:
            for row, exc in failures:
                env.reject(src[row], exc)
            bad = {row for row, _ in failures}
            keep = [i not in bad for i in range(len(keys))]
            keys = list(compress(keys, keep))
            values = list(compress(values, keep))
            src = list(compress(src, keep))
        refs = None
        if len(keys) > len(records):  # fan-out: format each input's sk.source once
            first = records[0]
            prefix = b"%s:%d:" % (first.topic.encode(), first.partition)
            refs = [prefix + b"%d" % r.offset for r in records]
        self.ctx.emit_rows(topic, keys, values, src, records, refs)

    @staticmethod
    def _serialize(ser: Any, column: list[Any], required: bool) -> tuple[list[Any], Failures]:
        """Serialize a column; None stays None (tombstone / no key) unless ``required``."""
        out, failures = convert(ser, column)
        if required and has_none(column):
            error = NullKeyError("a repartition topic needs a key; the record has none")
            failures += [(row, error) for row, key in enumerate(column) if key is None]
        return out, failures
