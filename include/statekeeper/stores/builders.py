"""Store builders in the spirit of Kafka Streams' ``Stores`` and ``Materialized``.

A :class:`StoreSpec` is a plain, picklable description (it travels to Spark executors);
:func:`build_store` turns it into the layer stack metered → caching → change-logging → inner
(a RocksDB inner store under a read cache, or a user's store from its supplier).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from statekeeper.errors import InvalidStoreConfigError
from statekeeper.stores.caching import CachingKeyValueStore
from statekeeper.stores.change_logging import (
    ChangeLoggingKeyValueStore,
    ChangeLoggingWindowStore,
    ChangelogSink,
)
from statekeeper.stores.lru import LRUKeyValueStore
from statekeeper.stores.memory import InMemoryKeyValueStore
from statekeeper.stores.read_cache import ReadCachingKeyValueStore
from statekeeper.stores.rocksdb import RocksDBKeyValueStore
from statekeeper.stores.serdes import Serde, serde_for
from statekeeper.stores.supplier import StoreSupplier
from statekeeper.stores.supplier_contract import check_supplier
from statekeeper.stores.time_windows import validate_retention
from statekeeper.stores.typed import KeyValueStore, WindowStore
from statekeeper.stores.window_bytes import WindowBytesStore

StoreKind = Literal["rocksdb", "memory", "lru", "window", "custom"]
# Kafka Streams keeps window changelogs one day longer than the store, so a restore after
# a long outage still finds every live window.
WINDOW_CHANGELOG_EXTRA_RETENTION_MS = 24 * 60 * 60 * 1000
#: The log cleaner leaves records this young alone. The commit protocol needs it where the
#: broker compacts: a crashed attempt's uncommitted record can supersede its key's committed
#: value, which the task's next open re-logs; reopened within this lag, nothing is lost
#: (tests/unit/state/test_compaction_safety.py, invariant 2 in docs/invariants.md).
CHANGELOG_MIN_COMPACTION_LAG_MS = 24 * 60 * 60 * 1000
#: Configs set when a changelog is created but not enforced on an existing one (changelogs
#: created before them are reported by ``statekeeper audit changelogs`` and fixed by --fix).
CREATE_ONLY_CHANGELOG_CONFIGS = frozenset({"min.compaction.lag.ms"})
#: Per persistent key-value store: ~50k entries of small keys and values.
DEFAULT_READ_CACHE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class StoreSpec:
    """Everything needed to build one store; immutable, fluent ``with_*`` methods copy it."""

    name: str
    kind: StoreKind
    key_serde: str | Serde[Any] = "bytes"
    value_serde: str | Serde[Any] = "bytes"
    logging_enabled: bool = True
    topic_configs: dict[str, str] = field(default_factory=dict)
    caching_max_bytes: int = 0
    read_cache_max_bytes: int = DEFAULT_READ_CACHE_BYTES  # RocksDB key-value stores only
    capacity: int | None = None  # LRU only
    persistent_windows: bool = True  # window only: RocksDB or in-memory segments (no supplier)
    #: A user's engine ("custom" key-value stores; window stores: their segments).
    supplier: StoreSupplier | None = None
    window_size_ms: int | None = None
    grace_ms: int = 0
    retention_ms: int | None = None

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or self.name.startswith("."):
            raise InvalidStoreConfigError(f"invalid store name {self.name!r}")
        if self.kind == "custom" and self.supplier is None:
            raise InvalidStoreConfigError(
                f"custom store {self.name!r} needs a supplier (Stores.custom(name, supplier))"
            )
        if self.supplier is not None:
            if self.kind not in ("custom", "window"):
                raise InvalidStoreConfigError(
                    f"store {self.name!r}: a supplier makes custom and window stores, not "
                    f"{self.kind!r} ones"
                )
            check_supplier(self.supplier, self.name)
        if self.kind == "lru" and (self.capacity is None or self.capacity < 1):
            raise InvalidStoreConfigError(f"LRU store {self.name!r} needs capacity >= 1")
        if self.caching_max_bytes < 0:
            raise InvalidStoreConfigError(f"store {self.name!r}: cache size must be >= 0")
        if self.read_cache_max_bytes < 0:
            raise InvalidStoreConfigError(
                f"store {self.name!r}: read cache size must be >= 0 (0 turns it off)"
            )
        if self.kind == "window":
            if self.window_size_ms is None or self.retention_ms is None:
                raise InvalidStoreConfigError(
                    f"window store {self.name!r} needs size and retention"
                )
            if self.window_size_ms <= 0 or self.grace_ms < 0 or self.retention_ms <= 0:
                raise InvalidStoreConfigError(
                    f"window store {self.name!r}: size ({self.window_size_ms} ms) and retention "
                    f"({self.retention_ms} ms) must be > 0 and grace ({self.grace_ms} ms) >= 0"
                )
            validate_retention(self.name, self.retention_ms, self.window_size_ms, self.grace_ms)
            if self.caching_max_bytes:
                raise InvalidStoreConfigError(
                    f"window store {self.name!r}: record caching is not supported for window "
                    "stores; drop with_caching_enabled()"
                )

    @property
    def persistent(self) -> bool:
        """Whether the store's state lives in files under its directory across restarts."""
        if self.supplier is not None:
            return self.supplier.persistent
        return self.kind == "rocksdb" or (self.kind == "window" and self.persistent_windows)

    @property
    def engine(self) -> str:
        """What holds the data: "rocksdb", "memory", "lru" or the supplier's engine."""
        if self.supplier is not None:
            return self.supplier.engine
        if self.kind == "window":
            return "rocksdb" if self.persistent_windows else "memory"
        return self.kind

    def with_serdes(self, key: str | Serde[Any], value: str | Serde[Any]) -> StoreSpec:
        return dataclasses.replace(self, key_serde=key, value_serde=value)

    def with_logging_enabled(self, topic_configs: dict[str, str] | None = None) -> StoreSpec:
        return dataclasses.replace(
            self, logging_enabled=True, topic_configs=dict(topic_configs or {})
        )

    def with_logging_disabled(self) -> StoreSpec:
        return dataclasses.replace(self, logging_enabled=False)

    def with_caching_enabled(self, max_bytes: int = 10 * 1024 * 1024) -> StoreSpec:
        return dataclasses.replace(self, caching_max_bytes=max_bytes)

    def with_caching_disabled(self) -> StoreSpec:
        return dataclasses.replace(self, caching_max_bytes=0)

    def with_read_cache(self, max_bytes: int) -> StoreSpec:
        """Bytes of recently read or written values a RocksDB store keeps in memory (0: off)."""
        return dataclasses.replace(self, read_cache_max_bytes=max_bytes)

    def with_retention(self, retention_ms: int) -> StoreSpec:
        if self.kind != "window":
            raise InvalidStoreConfigError(
                f"store {self.name!r}: retention applies to window stores"
            )
        return dataclasses.replace(self, retention_ms=retention_ms)

    def changelog_topic_configs(self) -> dict[str, str]:
        """Changelog topic configs: compacted; windows also expire by time. User configs win."""
        configs = {
            "cleanup.policy": "compact",
            "min.compaction.lag.ms": str(CHANGELOG_MIN_COMPACTION_LAG_MS),
        }
        if self.kind == "window":
            assert self.retention_ms is not None
            configs["cleanup.policy"] = "compact,delete"
            configs["retention.ms"] = str(self.retention_ms + WINDOW_CHANGELOG_EXTRA_RETENTION_MS)
        configs.update(self.topic_configs)
        return configs


class Stores:
    """Factory for store specs (``Stores.persistent("counts").with_serdes("str", "int")``)."""

    @staticmethod
    def persistent(name: str) -> StoreSpec:
        return StoreSpec(name=name, kind="rocksdb")

    @staticmethod
    def in_memory(name: str) -> StoreSpec:
        return StoreSpec(name=name, kind="memory")

    @staticmethod
    def lru_map(name: str, capacity: int) -> StoreSpec:
        return StoreSpec(name=name, kind="lru", capacity=capacity)

    @staticmethod
    def custom(name: str, supplier: StoreSupplier) -> StoreSpec:
        """A key-value store of a user's engine (docs/custom-stores.md); the supplier is
        probed against the store contract here."""
        return StoreSpec(name=name, kind="custom", supplier=supplier)

    @staticmethod
    def window(
        name: str,
        *,
        size_ms: int,
        retention_ms: int,
        grace_ms: int = 0,
        persistent: bool = True,
        supplier: StoreSupplier | None = None,
    ) -> StoreSpec:
        """A window store; ``supplier``: its segments in a user's engine (the supplier then
        says whether they persist, whatever ``persistent`` says)."""
        return StoreSpec(
            name=name,
            kind="window",
            window_size_ms=size_ms,
            grace_ms=grace_ms,
            retention_ms=retention_ms,
            persistent_windows=persistent,
            supplier=supplier,
        )


AnyStore = KeyValueStore[Any, Any] | WindowStore[Any, Any]


def build_store(spec: StoreSpec, store_dir: Path, sink: ChangelogSink | None) -> AnyStore:
    """Build the layer stack for ``spec``; ``sink`` gets changelog records (None: no logging)."""
    key_serde, value_serde = serde_for(spec.key_serde), serde_for(spec.value_serde)
    if spec.kind == "window":
        assert spec.window_size_ms is not None and spec.retention_ms is not None
        segments: Any
        if spec.supplier is not None:
            segments = spec.supplier.get(spec.name, store_dir)
        elif spec.persistent_windows:
            segments = RocksDBKeyValueStore(spec.name, store_dir)
        else:
            segments = InMemoryKeyValueStore(spec.name)
        window: Any = WindowBytesStore(
            spec.name, segments, retention_ms=spec.retention_ms, window_size_ms=spec.window_size_ms
        )
        if spec.logging_enabled and sink is not None:
            window = ChangeLoggingWindowStore(window, sink)
        return WindowStore(window, key_serde, value_serde)

    inner: Any
    if spec.kind == "rocksdb":
        inner = RocksDBKeyValueStore(spec.name, store_dir)
        if spec.read_cache_max_bytes:
            inner = ReadCachingKeyValueStore(inner, spec.read_cache_max_bytes)
    elif spec.kind == "memory":
        inner = InMemoryKeyValueStore(spec.name)
    elif spec.kind == "lru":
        assert spec.capacity is not None
        inner = LRUKeyValueStore(spec.name, spec.capacity)
    elif spec.kind == "custom":
        assert spec.supplier is not None
        inner = spec.supplier.get(spec.name, store_dir)
    else:  # pragma: no cover - Literal guards this
        raise InvalidStoreConfigError(f"unknown store kind {spec.kind!r}")
    if spec.logging_enabled and sink is not None:
        inner = ChangeLoggingKeyValueStore(inner, sink)
    if spec.caching_max_bytes:
        inner = CachingKeyValueStore(inner, spec.caching_max_bytes)
    return KeyValueStore(inner, key_serde, value_serde)
