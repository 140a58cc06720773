"""TimeWindowedKStream: count / reduce / aggregate per key and time window."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statekeeper.runtime.dsl.materialized import Materialized, materialized_or_default
from statekeeper.runtime.nodes import SerdeRef
from statekeeper.runtime.processors.aggregate import Aggregation
from statekeeper.runtime.processors.window_aggregate import WindowAggregateOp
from statekeeper.stores.windows import TimeWindows

if TYPE_CHECKING:
    from statekeeper.runtime.dsl.grouped import KGroupedStream
    from statekeeper.runtime.dsl.ktable import KTable


class TimeWindowedKStream:
    """A grouped stream cut into windows; aggregations give a table keyed by
    :class:`~statekeeper.runtime.windowed_key.Windowed`, kept in a window store (retention
    defaults to size + grace; ``Materialized.with_retention`` raises it)."""

    def __init__(self, grouped: KGroupedStream, windows: TimeWindows) -> None:
        if not isinstance(windows, TimeWindows):
            raise TypeError(f"windowed_by() needs TimeWindows, got {type(windows).__name__}")
        self._grouped = grouped
        self._builder = grouped._builder
        self.windows = windows

    def _aggregate(
        self,
        aggregation: Aggregation,
        materialized: Materialized | str | None,
        value_serde: SerdeRef | None,
        name: str | None,
    ) -> KTable:
        from statekeeper.runtime.dsl.ktable import KTable

        b = self._builder
        m = materialized_or_default(materialized)
        store = m.name or b._store_name("KSTREAM-AGGREGATE")
        node, key, value = self._grouped.input_node(store)
        spec = m.window_spec(store, self.windows, key, value_serde or value)
        b._add_store(spec)
        op = WindowAggregateOp(spec.name, aggregation, self.windows)
        proc = b._add_processor("KSTREAM-AGGREGATE", op, [node], [spec.name], name)
        return KTable(
            b, proc, spec.key_serde, spec.value_serde, window_store=spec.name, windows=self.windows
        )

    def count(
        self, materialized: Materialized | str | None = None, *, name: str | None = None
    ) -> KTable:
        return self._aggregate(Aggregation("count"), materialized, "int", name)

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        return self._aggregate(Aggregation("reduce", reducer=reducer), materialized, None, name)

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        aggregation = Aggregation("aggregate", initializer=initializer, aggregator=aggregator)
        default_value = self._builder.default_value_serde
        return self._aggregate(aggregation, materialized, default_value, name)
