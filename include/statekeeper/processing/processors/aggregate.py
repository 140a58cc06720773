"""count / reduce / aggregate of a grouped stream into a key-value store (a KTable).

Record at a time: read the key's aggregate, apply, write, forward the new value.
Batch (vectorised chain): fold each key's records in order starting from ONE ``get_many``
over the distinct keys, write with ONE ``put_all``, and forward one change per distinct key
(like a record cache flushed once per batch). The final state equals record-at-a-time
processing; an aggregate of None deletes the key and forwards a tombstone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from itertools import repeat
from operator import is_
from typing import Any

from statekeeper.processing.column_batch import ColumnBatchEnv, Columns
from statekeeper.processing.dlq import is_fatal
from statekeeper.processing.errors import NullKeyError
from statekeeper.processing.nodes import Op
from statekeeper.processing.processor import Processor, ProcessorContext, Record
from statekeeper.stores.base import has_none


class Aggregation:
    """How a new value is folded into a key's aggregate (``None`` = no aggregate yet)."""

    def __init__(
        self,
        kind: str,
        *,
        initializer: Callable[[], Any] | None = None,
        aggregator: Callable[[Any, Any, Any], Any] | None = None,
        reducer: Callable[[Any, Any], Any] | None = None,
    ) -> None:
        if kind not in ("count", "reduce", "aggregate"):
            raise ValueError(f"unknown aggregation {kind!r}")
        if kind == "reduce" and not callable(reducer):
            raise TypeError("reduce needs a reducer(aggregate, value)")
        if kind == "aggregate" and not (callable(initializer) and callable(aggregator)):
            raise TypeError("aggregate needs initializer() and aggregator(key, value, aggregate)")
        self.kind = kind
        self.initializer = initializer
        self.aggregator = aggregator
        self.reducer = reducer

    def apply(self, key: Any, value: Any, aggregate: Any) -> Any:
        if self.kind == "count":
            return 1 if aggregate is None else aggregate + 1
        if self.kind == "reduce":
            return value if aggregate is None else self.reducer(aggregate, value)  # type: ignore[misc]
        if aggregate is None:
            aggregate = self.initializer()  # type: ignore[misc]
        return self.aggregator(key, value, aggregate)  # type: ignore[misc]


def check_key(key: Any, what: str) -> None:
    if key is None:
        raise NullKeyError(f"{what} needs a key; the record has none")


class KStreamAggregateOp(Op):
    """Grouped-stream aggregation into the key-value store ``store``."""

    kind = "KSTREAM-AGGREGATE"
    batch_role = "aggregate"

    def __init__(self, store: str, aggregation: Aggregation) -> None:
        self.store = store
        self.aggregation = aggregation

    def create(self) -> Processor:
        return _AggregateProcessor(self)

    def aggregate_batch(
        self, cols: Columns, env: ColumnBatchEnv, store: Any, *, emits: bool = True
    ) -> Columns:
        """Fold a whole batch; returns one row per changed key (value = new aggregate).
        With ``emits=False`` (nothing downstream) the rows' input records are not tracked."""
        cols = _drop_unusable(cols, env)
        if not cols.keys:
            return cols
        src = cols.sources()
        groups: dict[Any, list[tuple[Any, int]]] | None = None

        def rows_of(key: Any) -> list[tuple[Any, int]]:
            nonlocal groups
            if groups is None:
                groups = _group(cols)
            return groups[key]

        if self.aggregation.kind == "count":
            counts = Counter(cols.keys)
            keys = list(counts)
            checked, olds = _get_many(store, keys, rows_of, env)
            added = counts.values() if checked is keys else map(counts.get, checked)
            keys = checked
            news = [c if o is None else o + c for o, c in zip(olds, added, strict=True)]
            last: list[int] = []
            if emits:
                last_of = dict(zip(cols.keys, src, strict=True))
                last = [last_of[k] for k in keys]
        else:
            groups = _group(cols)
            keys, olds = _get_many(store, list(groups), rows_of, env)
            news, last = self._fold(keys, olds, rows_of)
        keys, news, last = self._store(store, keys, olds, news, last, rows_of, env)
        return Columns(keys, news, last if emits else None)

    def _fold(self, keys: list[Any], olds: list[Any], rows_of: Any) -> tuple[list[Any], list[int]]:
        """Each key's new aggregate and last input index; :data:`_REFOLD` where a user
        function raised (the key is then redone record by record, see :meth:`_store`)."""
        apply = self.aggregation.apply
        news, last = [], []
        for k, agg in zip(keys, olds, strict=True):
            i = -1
            try:
                for v, i in rows_of(k):  # noqa: B007 - i is the last row afterwards
                    agg = apply(k, v, agg)
            except Exception as exc:
                if is_fatal(exc):
                    raise
                agg = _REFOLD
            news.append(agg)
            last.append(i)
        return news, last

    def _store(
        self,
        store: Any,
        keys: list[Any],
        olds: list[Any],
        news: list[Any],
        last: list[int],
        rows_of: Any,
        env: ColumnBatchEnv,
    ) -> tuple[list[Any], list[Any], list[int]]:
        """Write the results with one ``put_all``. Keys whose fold raised or whose result
        does not serialize are refolded record by record from their old value, checking
        every step as record-at-a-time processing would: records that fail (in the user
        function or in the store's serde) go to the DLQ and leave the aggregate as it was."""
        if not any(map(is_, news, repeat(_REFOLD))):
            try:
                store.put_columns(keys, news)
                return keys, news, last
            except Exception as exc:
                if is_fatal(exc):
                    raise
        redo = {n for n, new in enumerate(news) if new is _REFOLD}
        serialize = store.value_serde.serialize
        for n, new in enumerate(news):
            if n not in redo and new is not None:
                try:
                    serialize(new)
                except Exception:
                    redo.add(n)
        apply = self.aggregation.apply
        out_keys, out_news, out_last = [], [], []
        for n, k in enumerate(keys):
            if n not in redo:
                out_keys.append(k)
                out_news.append(news[n])
                out_last.append(last[n] if last else -1)
                continue
            agg, applied = olds[n], None
            for v, i in rows_of(k):
                try:
                    candidate = apply(k, v, agg)
                    if candidate is not None:
                        serialize(candidate)
                except Exception as exc:
                    env.reject(i, exc)
                    continue
                agg, applied = candidate, i
            if applied is not None:
                out_keys.append(k)
                out_news.append(agg)
                out_last.append(applied)
        store.put_columns(out_keys, out_news)
        return out_keys, out_news, out_last


_REFOLD: Any = object()


def _group(cols: Columns) -> dict[Any, list[tuple[Any, int]]]:
    """Each key's (value, input index) rows, in order."""
    groups: dict[Any, list[tuple[Any, int]]] = {}
    for k, v, i in zip(cols.keys, cols.values, cols.sources(), strict=True):
        rows = groups.get(k)
        if rows is None:
            groups[k] = [(v, i)]
        else:
            rows.append((v, i))
    return groups


def _get_many(
    store: Any, keys: list[Any], rows_of: Any, env: ColumnBatchEnv
) -> tuple[list[Any], list[Any]]:
    """One ``get_many``; keys the store cannot serialize dead-letter their records."""
    try:
        return keys, store.get_many(keys)
    except Exception as exc:
        if is_fatal(exc):
            raise
    good = []
    for k in keys:
        try:
            store.key_serde.serialize(k)
        except Exception as exc:
            for _, i in rows_of(k):
                env.reject(i, exc)
        else:
            good.append(k)
    return good, store.get_many(good)


def _drop_unusable(cols: Columns, env: ColumnBatchEnv) -> Columns:
    """Keyless rows go to the DLQ; rows without a value are dropped (as Kafka Streams does)."""
    if not has_none(cols.keys) and not has_none(cols.values):
        return cols
    keys, values, src = [], [], []
    dropped = 0
    for k, v, i in zip(cols.keys, cols.values, cols.sources(), strict=True):
        if k is None:
            env.reject(i, NullKeyError("aggregation needs a key; the record has none"))
        elif v is None:
            dropped += 1
        else:
            keys.append(k)
            values.append(v)
            src.append(i)
    if dropped:
        env.count_dropped(dropped)
    return Columns(keys, values, src)


class _AggregateProcessor(Processor):
    def __init__(self, op: KStreamAggregateOp) -> None:
        self.op = op
        self.apply = op.aggregation.apply

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.store = context.get_state_store(self.op.store)
        self.forward = context.forward

    def process(self, record: Record) -> None:
        key = record.key
        check_key(key, "aggregation")
        if record.value is None:
            self.context.count_dropped()  # type: ignore[attr-defined]
            return
        new = self.apply(key, record.value, self.store.get(key))
        self.store.put(key, new)
        self.forward(Record(key, new, record.timestamp, record.headers))
