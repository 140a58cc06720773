"""KStream: a record stream and its DSL operations."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from statekeeper.processing.dsl.grouped import Grouped, KGroupedStream, grouped_or_default
from statekeeper.processing.dsl.joins import stream_table_join
from statekeeper.processing.dsl.materialized import Materialized, materialized_or_default
from statekeeper.processing.errors import TopologyError
from statekeeper.processing.nodes import Op, SerdeRef, TopicRef
from statekeeper.processing.processor import ProcessorSupplier
from statekeeper.processing.processors.custom import CustomOp
from statekeeper.processing.processors.joins import Joiner
from statekeeper.processing.processors.stateless import KINDS, StatelessOp
from statekeeper.processing.processors.table import MaterializeOp
from statekeeper.stores.time_windows import TimeWindows

if TYPE_CHECKING:
    from statekeeper.processing.dsl.ktable import KTable
    from statekeeper.processing.dsl.streams_builder import StreamsBuilder

_KEEP = object()


class KStream:
    """A stream of records. Operations return new streams; nothing runs until the topology
    is built and executed by stream tasks.

    Serdes travel with the stream while they are known (a ``map_values`` forgets the value
    serde, a key-changing op the key serde); unknown serdes fall back to the builder's
    defaults where records are written (repartition topics, stores, ``to``).
    """

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: SerdeRef | None,
        value_serde: SerdeRef | None,
        *,
        key_changed: bool = False,
        windows: TimeWindows | None = None,
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_serde = key_serde
        self._value_serde = value_serde
        self._key_changed = key_changed
        self._windows = windows  # keys are Windowed(key, start, end)

    @property
    def node_name(self) -> str:
        return self._node

    def _then(
        self,
        op: Op,
        name: str | None,
        *,
        key_serde: Any = _KEEP,
        value_serde: Any = _KEEP,
        key_changed: bool = False,
        stores: Sequence[str] = (),
    ) -> KStream:
        node = self._builder._add_processor(op.kind, op, [self._node], list(stores), name)
        return KStream(
            self._builder,
            node,
            self._key_serde if key_serde is _KEEP else key_serde,
            self._value_serde if value_serde is _KEEP else value_serde,
            key_changed=self._key_changed or key_changed,
            windows=None if key_changed else self._windows,
        )

    def _stateless(self, kind: str, fn: Callable[..., Any], name: str | None, **kw: Any) -> KStream:
        assert kind in KINDS
        return self._then(StatelessOp(kind, fn), name, **kw)

    # -- stateless -------------------------------------------------------------------------

    def map(self, fn: Callable[[Any, Any], tuple[Any, Any]], *, name: str | None = None) -> KStream:
        """``fn(key, value) -> (new_key, new_value)``."""
        return self._stateless("map", fn, name, key_serde=None, value_serde=None, key_changed=True)

    def map_values(self, fn: Callable[[Any], Any], *, name: str | None = None) -> KStream:
        """``fn(value) -> new_value``."""
        return self._stateless("map_values", fn, name, value_serde=None)

    def filter(self, predicate: Callable[[Any, Any], bool], *, name: str | None = None) -> KStream:
        """Keep records with ``predicate(key, value)`` true."""
        return self._stateless("filter", predicate, name)

    def filter_not(
        self, predicate: Callable[[Any, Any], bool], *, name: str | None = None
    ) -> KStream:
        """Drop records with ``predicate(key, value)`` true."""
        return self._stateless("filter_not", predicate, name)

    def flat_map(
        self, fn: Callable[[Any, Any], Iterable[tuple[Any, Any]]], *, name: str | None = None
    ) -> KStream:
        """``fn(key, value) -> [(key, value), ...]``."""
        return self._stateless(
            "flat_map", fn, name, key_serde=None, value_serde=None, key_changed=True
        )

    def flat_map_values(
        self, fn: Callable[[Any], Iterable[Any]], *, name: str | None = None
    ) -> KStream:
        """``fn(value) -> [value, ...]``, each with the record's key."""
        return self._stateless("flat_map_values", fn, name, value_serde=None)

    def select_key(self, fn: Callable[[Any, Any], Any], *, name: str | None = None) -> KStream:
        """``fn(key, value) -> new_key``."""
        return self._stateless("select_key", fn, name, key_serde=None, key_changed=True)

    def peek(self, fn: Callable[[Any, Any], None], *, name: str | None = None) -> KStream:
        """Call ``fn(key, value)`` for its side effect; records pass unchanged."""
        return self._stateless("peek", fn, name)

    # -- Processor API ---------------------------------------------------------------------

    def process(
        self,
        processor: ProcessorSupplier,
        stores: Sequence[str] = (),
        *,
        name: str | None = None,
    ) -> KStream:
        """Run a custom :class:`~statekeeper.processing.processor.Processor` (``processor`` is a
        Processor class or a zero-argument factory) connected to ``stores``; records it
        forwards form the returned stream."""
        if isinstance(stores, str):
            raise TopologyError("process(stores=...) takes a list of store names")
        return self._then(
            CustomOp(processor),
            name,
            key_serde=None,
            value_serde=None,
            key_changed=True,
            stores=list(stores),
        )

    def process_values(
        self,
        processor: ProcessorSupplier,
        stores: Sequence[str] = (),
        *,
        name: str | None = None,
    ) -> KStream:
        """Like :meth:`process`, for a processor that never changes keys (Kafka Streams'
        ``processValues``): the stream stays partitioned by its key, so no repartition is
        needed before grouping or joining."""
        if isinstance(stores, str):
            raise TopologyError("process_values(stores=...) takes a list of store names")
        return self._then(CustomOp(processor), name, value_serde=None, stores=list(stores))

    # -- grouping and repartitioning -------------------------------------------------------

    def group_by_key(self, grouped: Grouped | str | None = None) -> KGroupedStream:
        """Group by the current key; repartitions first if an upstream op changed the key."""
        self._check_not_windowed("group_by_key")
        return KGroupedStream(self, grouped_or_default(grouped), self._key_changed)

    def group_by(
        self, fn: Callable[[Any, Any], Any], grouped: Grouped | str | None = None
    ) -> KGroupedStream:
        """Group by ``fn(key, value)``: always repartitions (topic
        ``<app>-<grouped name>-repartition``)."""
        rekeyed = self.select_key(fn)
        return KGroupedStream(rekeyed, grouped_or_default(grouped), True)

    def repartition(self, grouped: Grouped | str | None = None) -> KStream:
        """Write the stream through a repartition topic so it is partitioned by its key."""
        self._check_not_windowed("repartition")
        g = grouped_or_default(grouped)
        b = self._builder
        key = g.key_serde or self._key_serde or b.default_key_serde
        value = g.value_serde or self._value_serde or b.default_value_serde
        topic = g.name or b._generated_name("KSTREAM-REPARTITION")
        source = b._repartition(
            self._node, topic, key, value, key_required=False, partitions=g.partitions
        )
        return KStream(b, source, key, value)

    # -- joins -----------------------------------------------------------------------------

    def join(self, table: KTable, joiner: Joiner, *, name: str | None = None) -> KStream:
        """Inner stream-table join: ``joiner(value, table_value)`` for records whose key is in
        the table at processing time; others are dropped."""
        return stream_table_join(self, table, joiner, left=False, name=name)

    def left_join(self, table: KTable, joiner: Joiner, *, name: str | None = None) -> KStream:
        """Left stream-table join: ``joiner(value, table_value_or_None)`` for every record."""
        return stream_table_join(self, table, joiner, left=True, name=name)

    # -- sinks and tables ------------------------------------------------------------------

    def to(
        self,
        topic: str,
        key_serde: SerdeRef | None = None,
        value_serde: SerdeRef | None = None,
        *,
        name: str | None = None,
    ) -> None:
        """Write the stream to ``topic`` (partition = murmur2 of the key bytes)."""
        b = self._builder
        if self._windows is not None and key_serde is None:
            raise TopologyError(
                f"to({topic!r}): the keys of this stream are Windowed(key, start, end); pass "
                "key_serde=WindowedSerde(<inner serde>, window_size_ms) or map the key first "
                "(e.g. .map(lambda wk, v: (wk.key, v)))"
            )
        b._add_sink(
            self._node,
            TopicRef(b._check_topic(topic)),
            key_serde or self._key_serde or b.default_key_serde,
            value_serde or self._value_serde or b.default_value_serde,
            name=name,
        )

    def to_table(
        self, materialized: Materialized | str | None = None, *, name: str | None = None
    ) -> KTable:
        """Materialise the stream as a table (upserts; None values delete the key)."""
        from statekeeper.processing.dsl.ktable import KTable

        self._check_not_windowed("to_table")
        b = self._builder
        m = materialized_or_default(materialized)
        spec = m.key_value_spec(
            m.name or b._store_name("KSTREAM-TOTABLE"),
            self._key_serde or b.default_key_serde,
            self._value_serde or b.default_value_serde,
        )
        b._add_store(spec)
        op = MaterializeOp(spec.name, kind="KSTREAM-TOTABLE")
        node = b._add_processor(op.kind, op, [self._node], [spec.name], name)
        return KTable(b, node, spec.key_serde, spec.value_serde, store=spec.name)

    def _check_not_windowed(self, what: str) -> None:
        if self._windows is not None:
            raise TopologyError(
                f"{what}() on a stream of Windowed keys: map the key first "
                "(e.g. .map(lambda wk, v: (wk.key, v)))"
            )
