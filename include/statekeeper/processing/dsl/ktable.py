"""KTable: a changelog stream interpreted as a table (latest value per key; None deletes)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from statekeeper.processing.dsl.joins import table_table_join
from statekeeper.processing.dsl.materialized import Materialized, materialized_or_default
from statekeeper.processing.dsl.suppress import Suppressed
from statekeeper.processing.errors import TopologyError
from statekeeper.processing.nodes import BufferInfo, SerdeRef
from statekeeper.processing.processors.joins import Joiner
from statekeeper.processing.processors.suppress import SuppressOp
from statekeeper.processing.processors.table import MaterializeOp, TableOp
from statekeeper.stores.builders import Stores
from statekeeper.stores.time_windows import TimeWindows

if TYPE_CHECKING:
    from statekeeper.processing.dsl.kstream import KStream
    from statekeeper.processing.dsl.streams_builder import StreamsBuilder


class KTable:
    """A table. ``store_name`` is its key-value store when materialised; windowed tables
    (from ``windowed_by``) have Windowed keys and live in ``window_store_name``."""

    def __init__(
        self,
        builder: StreamsBuilder,
        node: str,
        key_serde: SerdeRef | None,
        value_serde: SerdeRef | None,
        *,
        store: str | None = None,
        window_store: str | None = None,
        windows: TimeWindows | None = None,
        buffer_store: str | None = None,
    ) -> None:
        self._builder = builder
        self._node = node
        self._key_serde = key_serde  # the inner key's serde for windowed tables
        self._value_serde = value_serde
        self._store = store
        self._window_store = window_store
        self._windows = windows
        self._buffer_store = buffer_store

    @property
    def node_name(self) -> str:
        return self._node

    @property
    def store_name(self) -> str | None:
        """Key-value store holding this table (None if not materialised)."""
        return self._store

    @property
    def window_store_name(self) -> str | None:
        return self._window_store

    @property
    def buffer_store_name(self) -> str | None:
        """The suppression buffer store of a ``suppress()`` result (connect it to a custom
        processor to drop a key's pending windows)."""
        return self._buffer_store

    def _derive(
        self, op: TableOp, materialized: Materialized | str | None, name: str | None
    ) -> KTable:
        b = self._builder
        value_serde = self._value_serde if op.op in ("filter", "filter_not") else None
        spec = None
        if materialized is not None:
            if self._windows is not None:
                raise TopologyError("a windowed table cannot be materialised in a key-value store")
            m = materialized_or_default(materialized)
            spec = m.key_value_spec(
                m.name or b._store_name(op.kind),
                self._key_serde or b.default_key_serde,
                value_serde or b.default_value_serde,
            )
            b._add_store(spec)
            op.store = spec.name
            value_serde = spec.value_serde
        node = b._add_processor(op.kind, op, [self._node], [spec.name] if spec else [], name)
        return KTable(
            b,
            node,
            self._key_serde,
            value_serde,
            store=spec.name if spec else None,
            windows=self._windows,
        )

    def filter(
        self,
        predicate: Callable[[Any, Any], bool],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """Rows failing ``predicate(key, value)`` become tombstones."""
        return self._derive(TableOp("filter", predicate), materialized, name)

    def filter_not(
        self,
        predicate: Callable[[Any, Any], bool],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        return self._derive(TableOp("filter_not", predicate), materialized, name)

    def map_values(
        self,
        fn: Callable[[Any], Any],
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """``fn(value)`` for each update; tombstones stay tombstones, a None result is one."""
        return self._derive(TableOp("map_values", fn), materialized, name)

    def to_stream(self, *, name: str | None = None) -> KStream:
        """The table's updates as a stream (tombstones included, as None values)."""
        from statekeeper.processing.dsl.kstream import KStream

        b = self._builder
        op = TableOp("to_stream", None)
        node = b._add_processor(op.kind, op, [self._node], [], name)
        return KStream(b, node, self._key_serde, self._value_serde, windows=self._windows)

    def to(
        self,
        topic: str,
        key_serde: SerdeRef | None = None,
        value_serde: SerdeRef | None = None,
        *,
        name: str | None = None,
    ) -> None:
        """``to_stream().to(topic, ...)``."""
        self.to_stream().to(topic, key_serde, value_serde, name=name)

    def suppress(self, suppressed: Suppressed, *, name: str | None = None) -> KTable:
        """Hold updates of a windowed table and emit each window's final value once, when
        stream time reaches window end + grace."""
        if self._windows is None:
            raise TopologyError("suppress(until_window_closes) needs a windowed table")
        if not isinstance(suppressed, Suppressed):
            raise TopologyError(f"suppress() takes Suppressed, got {suppressed!r}")
        b = self._builder
        store = f"{suppressed.name}-store" if suppressed.name else b._store_name("KTABLE-SUPPRESS")
        b._add_store(Stores.persistent(store).with_serdes("bytes", "bytes"))
        b._buffers[store] = BufferInfo(
            self._key_serde or b.default_key_serde,
            self._value_serde or b.default_value_serde,
            self._windows.size_ms,
        )
        op = SuppressOp(store, self._windows.grace_ms)
        node = b._add_processor(op.kind, op, [self._node], [store], name or suppressed.name)
        return KTable(
            b,
            node,
            self._key_serde,
            self._value_serde,
            windows=self._windows,
            buffer_store=store,
        )

    # -- joins -----------------------------------------------------------------------------

    def join(
        self,
        other: KTable,
        joiner: Joiner,
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """Inner table-table join (co-partitioned): ``joiner(value, other_value)``."""
        return table_table_join(
            self, other, joiner, left=False, materialized=materialized, name=name
        )

    def left_join(
        self,
        other: KTable,
        joiner: Joiner,
        materialized: Materialized | str | None = None,
        *,
        name: str | None = None,
    ) -> KTable:
        """Left table-table join: ``joiner(value, other_value_or_None)``."""
        return table_table_join(
            self, other, joiner, left=True, materialized=materialized, name=name
        )

    def ensure_materialized(self) -> str:
        """The table's key-value store, adding a materialising node if it has none."""
        if self._store is not None:
            return self._store
        if self._windows is not None:
            raise TopologyError(
                "a windowed table cannot be joined or looked up by key; map it to a stream "
                "with plain keys and use to_table() first"
            )
        b = self._builder
        spec = Materialized().key_value_spec(
            b._store_name("KTABLE-MATERIALIZE"),
            self._key_serde or b.default_key_serde,
            self._value_serde or b.default_value_serde,
        )
        b._add_store(spec)
        op = MaterializeOp(spec.name, kind="KTABLE-MATERIALIZE")
        self._node = b._add_processor(op.kind, op, [self._node], [spec.name], None)
        self._store = spec.name
        return spec.name
