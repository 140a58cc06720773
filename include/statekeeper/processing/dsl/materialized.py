"""Materialized: how a DSL table's store is named and built (like Kafka Streams').

``Materialized.as_("counts").with_store_type("lru", capacity=10_000).with_caching_enabled()``;
``Materialized.as_("counts", SQLiteStoreSupplier())`` keeps the table in a user's engine
(docs/custom-stores.md).
Unset fields fall back to what the DSL knows (serdes of the stream, a generated name).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from statekeeper.processing.errors import TopologyError
from statekeeper.processing.nodes import SerdeRef
from statekeeper.stores.builders import DEFAULT_READ_CACHE_BYTES, StoreSpec
from statekeeper.stores.supplier import StoreSupplier
from statekeeper.stores.time_windows import TimeWindows

StoreType = Literal["rocksdb", "in_memory", "lru"]
_KINDS = {"rocksdb": "rocksdb", "in_memory": "memory", "lru": "lru"}


@dataclass(frozen=True)
class Materialized:
    """Store options of a DSL table; every ``with_*`` returns a modified copy."""

    name: str | None = None
    store_type: StoreType = "rocksdb"
    capacity: int | None = None
    key_serde: SerdeRef | None = None
    value_serde: SerdeRef | None = None
    caching_max_bytes: int = 0
    read_cache_max_bytes: int = DEFAULT_READ_CACHE_BYTES
    logging_enabled: bool = True
    topic_configs: dict[str, str] = field(default_factory=dict)
    retention_ms: int | None = None
    supplier: StoreSupplier | None = None

    @classmethod
    def as_(cls, name: str | StoreSupplier, supplier: StoreSupplier | None = None) -> Materialized:
        """A named store (``as_("counts")``), optionally of a user's engine
        (``as_("counts", supplier)``, or ``as_(supplier)`` with a generated name)."""
        if isinstance(name, StoreSupplier):
            if supplier is not None:
                raise TopologyError("Materialized.as_() takes one supplier")
            return cls(supplier=name)
        return cls(name=name, supplier=supplier)

    def with_supplier(self, supplier: StoreSupplier) -> Materialized:
        """Keep the store in ``supplier``'s engine (docs/custom-stores.md)."""
        if not isinstance(supplier, StoreSupplier):
            raise TopologyError(f"with_supplier() takes a StoreSupplier, got {supplier!r}")
        return dataclasses.replace(self, supplier=supplier)

    @classmethod
    def with_(cls, key_serde: SerdeRef | None, value_serde: SerdeRef | None) -> Materialized:
        return cls(key_serde=key_serde, value_serde=value_serde)

    def with_store_type(self, store_type: StoreType, capacity: int | None = None) -> Materialized:
        if store_type not in _KINDS:
            raise TopologyError(f"store type must be one of {sorted(_KINDS)}, got {store_type!r}")
        if store_type == "lru" and not capacity:
            raise TopologyError("an 'lru' store needs a capacity")
        return dataclasses.replace(self, store_type=store_type, capacity=capacity)

    def with_key_serde(self, serde: SerdeRef) -> Materialized:
        return dataclasses.replace(self, key_serde=serde)

    def with_value_serde(self, serde: SerdeRef) -> Materialized:
        return dataclasses.replace(self, value_serde=serde)

    def with_serdes(self, key: SerdeRef, value: SerdeRef) -> Materialized:
        return dataclasses.replace(self, key_serde=key, value_serde=value)

    def with_caching_enabled(self, max_bytes: int = 10 * 1024 * 1024) -> Materialized:
        return dataclasses.replace(self, caching_max_bytes=max_bytes)

    def with_caching_disabled(self) -> Materialized:
        return dataclasses.replace(self, caching_max_bytes=0)

    def with_read_cache(self, max_bytes: int) -> Materialized:
        """Bytes of recently read or written values a RocksDB key-value store keeps in
        memory (default 8 MiB per task; 0 turns the read cache off)."""
        return dataclasses.replace(self, read_cache_max_bytes=max_bytes)

    def with_logging_enabled(self, topic_configs: dict[str, str] | None = None) -> Materialized:
        return dataclasses.replace(
            self, logging_enabled=True, topic_configs=dict(topic_configs or {})
        )

    def with_logging_disabled(self) -> Materialized:
        return dataclasses.replace(self, logging_enabled=False)

    def with_retention(self, retention_ms: int) -> Materialized:
        return dataclasses.replace(self, retention_ms=retention_ms)

    # -- building specs (used by the DSL) --------------------------------------------------

    def _check_supplier(self, name: str) -> None:
        if self.supplier is not None and self.store_type != "rocksdb":
            raise TopologyError(
                f"store {self.name or name!r}: a supplier's store has no store type "
                f"({self.store_type!r}); drop with_store_type() or the supplier"
            )

    def key_value_spec(self, name: str, key_serde: SerdeRef, value_serde: SerdeRef) -> StoreSpec:
        """The key-value store spec, with ``name`` and serdes as fallbacks."""
        if self.retention_ms is not None:
            raise TopologyError(f"store {name!r}: retention applies to windowed stores only")
        self._check_supplier(name)
        return StoreSpec(
            name=self.name or name,
            kind="custom" if self.supplier is not None else _KINDS[self.store_type],  # type: ignore[arg-type]
            supplier=self.supplier,
            key_serde=self.key_serde or key_serde,
            value_serde=self.value_serde or value_serde,
            logging_enabled=self.logging_enabled,
            topic_configs=dict(self.topic_configs),
            caching_max_bytes=self.caching_max_bytes,
            read_cache_max_bytes=self.read_cache_max_bytes,
            capacity=self.capacity,
        )

    def window_spec(
        self, name: str, windows: TimeWindows, key_serde: SerdeRef, value_serde: SerdeRef
    ) -> StoreSpec:
        """The window store spec; retention defaults to window size + grace."""
        if self.store_type == "lru":
            raise TopologyError(f"window store {self.name or name!r} cannot be an LRU store")
        self._check_supplier(name)
        return StoreSpec(
            name=self.name or name,
            kind="window",
            key_serde=self.key_serde or key_serde,
            value_serde=self.value_serde or value_serde,
            logging_enabled=self.logging_enabled,
            topic_configs=dict(self.topic_configs),
            caching_max_bytes=self.caching_max_bytes,
            persistent_windows=self.store_type == "rocksdb",
            supplier=self.supplier,
            window_size_ms=windows.size_ms,
            grace_ms=windows.grace_ms,
            retention_ms=self.retention_ms or windows.size_ms + windows.grace_ms,
        )


def materialized_or_default(materialized: Materialized | str | None) -> Materialized:
    """Accept a Materialized, a bare store name, or None."""
    if materialized is None:
        return Materialized()
    if isinstance(materialized, str):
        return Materialized.as_(materialized)
    if not isinstance(materialized, Materialized):
        raise TopologyError(f"expected Materialized or a store name, got {materialized!r}")
    return materialized
