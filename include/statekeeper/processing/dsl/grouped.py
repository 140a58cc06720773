"""Grouping: ``Grouped`` options and ``KGroupedStream`` (count / reduce / aggregate)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statekeeper.processing.dsl.materialized import Materialized, materialized_or_default
from statekeeper.processing.errors import TopologyError
from statekeeper.processing.nodes import Op, SerdeRef
from statekeeper.processing.processors.aggregate import Aggregation, KStreamAggregateOp
from statekeeper.processing.processors.window_aggregate import WindowAggregateOp
from statekeeper.stores.time_windows import TimeWindows

if TYPE_CHECKING:
    from statekeeper.processing.dsl.kstream import KStream
    from statekeeper.processing.dsl.ktable import KTable
    from statekeeper.processing.dsl.streams_builder import StreamsBuilder
    from statekeeper.processing.dsl.windowed import TimeWindowedKStream


@dataclass(frozen=True)
class Grouped:
    """Name and serdes of a grouping; a named grouping that needs a repartition writes
    ``<app>-<name>-repartition``."""

    name: str | None = None
    key_serde: SerdeRef | None = None
    value_serde: SerdeRef | None = None
    #: The repartition topic's partition count (Kafka Streams' ``Repartitioned``): None
    #: follows the upstream inputs. Changing it moves keys to other tasks: an upgrade's
    #: migration re-keys the state (docs/changing-apps.md).
    partitions: int | None = None

    @classmethod
    def as_(cls, name: str) -> Grouped:
        return cls(name=name)

    @classmethod
    def with_(cls, key_serde: SerdeRef | None, value_serde: SerdeRef | None) -> Grouped:
        return cls(key_serde=key_serde, value_serde=value_serde)

    def with_name(self, name: str) -> Grouped:
        return dataclasses.replace(self, name=name)

    def with_key_serde(self, serde: SerdeRef) -> Grouped:
        return dataclasses.replace(self, key_serde=serde)

    def with_value_serde(self, serde: SerdeRef) -> Grouped:
        return dataclasses.replace(self, value_serde=serde)

    def with_partitions(self, partitions: int) -> Grouped:
        if not isinstance(partitions, int) or partitions < 1:
            raise TopologyError(f"a repartition topic needs >= 1 partitions, got {partitions!r}")
        return dataclasses.replace(self, partitions=partitions)


def grouped_or_default(grouped: Grouped | str | None) -> Grouped:
    if grouped is None:
        return Grouped()
    if isinstance(grouped, str):
        return Grouped.as_(grouped)
    return grouped


class _Aggregations:
    """``count`` / ``reduce`` / ``aggregate`` of a grouped stream into a table: per key, or
    per key and window when ``_source`` gives windows."""

    _builder: StreamsBuilder

    def _source(self) -> tuple[KGroupedStream, TimeWindows | None]:
        raise NotImplementedError

    def _aggregate(
        self,
        aggregation: Aggregation,
        materialized: Materialized | str | None,
        value_serde: SerdeRef | None,
        name: str | None,
    ) -> KTable:
        from statekeeper.processing.dsl.ktable import KTable

        grouped_stream, windows = self._source()
        b = self._builder
        m = materialized_or_default(materialized)
        store = m.name or b._store_name("KSTREAM-AGGREGATE")
        node, key, value = grouped_stream.input_node(store)
        value = value_serde or value
        if windows is None:
            spec = m.key_value_spec(store, key, value)
            op: Op = KStreamAggregateOp(spec.name, aggregation)
        else:
            spec = m.window_spec(store, windows, key, value)
            op = WindowAggregateOp(spec.name, aggregation, windows)
        b._add_store(spec)
        proc = b._add_processor("KSTREAM-AGGREGATE", op, [node], [spec.name], name)
        if windows is None:
            return KTable(b, proc, spec.key_serde, spec.value_serde, store=spec.name)
        return KTable(
            b, proc, spec.key_serde, spec.value_serde, window_store=spec.name, windows=windows
        )

    def count(
        self, materialized: Materialized | str | None = None, *, name: str | None = None
    ) -> KTable:
        """Count records per key (values: ``int``)."""
        return self._aggregate(Aggregation("count"), materialized, "int", name)

    def reduce(
        self,
        reducer: Callable[[Any, Any], Any],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """``reducer(aggregate, value)``; the first value of a key is its aggregate."""
        return self._aggregate(Aggregation("reduce", reducer=reducer), materialized, None, name)

    def aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """``aggregator(key, value, aggregate)`` starting from ``initializer()``; None
        deletes the key (tombstone) and the next record starts again from the initializer."""
        aggregation = Aggregation("aggregate", initializer=initializer, aggregator=aggregator)
        default_value = self._builder.default_value_serde
        return self._aggregate(aggregation, materialized, default_value, name)


class KGroupedStream(_Aggregations):
    """A stream grouped by key, ready to aggregate. If the key may have changed upstream,
    the first aggregation inserts a repartition topic (named after the grouping, or after
    the aggregation's store)."""

    def __init__(self, stream: KStream, grouped: Grouped, repartition: bool) -> None:
        self._stream = stream
        self._builder = stream._builder
        self._grouped = grouped
        self._repartition = repartition
        self._input: tuple[str, SerdeRef, SerdeRef] | None = None

    def _serdes(self) -> tuple[SerdeRef, SerdeRef]:
        b, s, g = self._builder, self._stream, self._grouped
        key = g.key_serde or s._key_serde or b.default_key_serde
        value = g.value_serde or s._value_serde or b.default_value_serde
        return key, value

    def input_node(self, store_name: str) -> tuple[str, SerdeRef, SerdeRef]:
        """The node aggregations hang off (after the repartition, if one is needed)."""
        if self._input is None:
            key, value = self._serdes()
            node = self._stream._node
            if self._repartition:
                node = self._builder._repartition(
                    node,
                    self._grouped.name or store_name,
                    key,
                    value,
                    key_required=True,
                    partitions=self._grouped.partitions,
                )
            self._input = (node, key, value)
        return self._input

    def _source(self) -> tuple[KGroupedStream, TimeWindows | None]:
        return self, None

    def windowed_by(self, windows: TimeWindows) -> TimeWindowedKStream:
        """Aggregate per time window (tumbling or hopping, with grace)."""
        from statekeeper.processing.dsl.windowed import TimeWindowedKStream

        return TimeWindowedKStream(self, windows)
