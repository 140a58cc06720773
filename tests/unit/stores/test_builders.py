"""Store specs (picklable, immutable, fluent), changelog topic configs and build_store."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from spark_apps.word_count_sqlite.sqlite_store import SQLiteKeyValueStore
from statekeeper.errors import InvalidStoreConfigError
from statekeeper.stores.builders import (
    WINDOW_CHANGELOG_EXTRA_RETENTION_MS,
    Stores,
    StoreSpec,
    build_store,
)
from statekeeper.stores.caching import CachingKeyValueStore
from statekeeper.stores.change_logging import ChangeLoggingKeyValueStore, ChangeLoggingWindowStore
from statekeeper.stores.lru import LRUKeyValueStore
from statekeeper.stores.memory import InMemoryKeyValueStore
from statekeeper.stores.read_cache import ReadCachingKeyValueStore
from statekeeper.stores.rocksdb import RocksDBKeyValueStore
from statekeeper.stores.serdes import IntSerde, JsonSerde, SerdeError
from statekeeper.stores.typed import KeyValueStore, WindowStore
from statekeeper.stores.window_bytes import WindowBytesStore

from .custom_suppliers import (
    SQLiteStoreSupplier,
    StagingMemoryStore,
    StagingMemoryStoreSupplier,
)

DAY_MS = 24 * 60 * 60 * 1000
SQLITE = SQLiteStoreSupplier()
STAGING_MEMORY = StagingMemoryStoreSupplier()

SPECS = [
    Stores.persistent("rocks"),
    Stores.in_memory("mem").with_serdes("str", "json"),
    Stores.lru_map("lru", 5).with_logging_disabled(),
    Stores.persistent("cached").with_caching_enabled(4096),
    Stores.persistent("configured").with_logging_enabled({"min.insync.replicas": "2"}),
    Stores.window("win", size_ms=60_000, retention_ms=3_600_000, grace_ms=5_000),
    Stores.window("win-mem", size_ms=10, retention_ms=100, persistent=False),
    Stores.custom("custom", SQLITE).with_serdes("str", "int").with_caching_enabled(4096),
    Stores.window("win-custom", size_ms=10, retention_ms=100, supplier=SQLITE),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_spec_is_picklable(spec):
    clone = pickle.loads(pickle.dumps(spec))
    assert clone == spec
    assert clone is not spec


def test_spec_with_serde_objects_is_picklable():
    spec = Stores.persistent("s").with_serdes(IntSerde(), JsonSerde())
    clone = pickle.loads(pickle.dumps(spec))
    assert isinstance(clone.key_serde, IntSerde)
    assert isinstance(clone.value_serde, JsonSerde)


def test_spec_is_immutable():
    spec = Stores.persistent("s")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"  # type: ignore[misc]


def test_factories():
    assert Stores.persistent("a") == StoreSpec(name="a", kind="rocksdb")
    assert Stores.in_memory("b").kind == "memory"
    assert Stores.lru_map("c", 3).capacity == 3
    window = Stores.window("d", size_ms=10, retention_ms=50, grace_ms=5, persistent=False)
    assert (window.kind, window.window_size_ms, window.retention_ms, window.grace_ms) == (
        "window",
        10,
        50,
        5,
    )
    assert window.persistent_windows is False


def test_defaults():
    spec = Stores.persistent("s")
    assert spec.key_serde == "bytes" and spec.value_serde == "bytes"
    assert spec.logging_enabled is True
    assert spec.caching_max_bytes == 0
    assert spec.topic_configs == {}


@pytest.mark.parametrize(
    ("spec", "persistent"),
    [
        (Stores.persistent("s"), True),
        (Stores.in_memory("s"), False),
        (Stores.lru_map("s", 1), False),
        (Stores.window("s", size_ms=1, retention_ms=1), True),
        (Stores.window("s", size_ms=1, retention_ms=1, persistent=False), False),
        (Stores.custom("s", SQLITE), True),
        (Stores.custom("s", STAGING_MEMORY), False),
        (Stores.window("s", size_ms=1, retention_ms=1, supplier=SQLITE), True),
        # The supplier decides, whatever persistent= says.
        (Stores.window("s", size_ms=1, retention_ms=1, supplier=STAGING_MEMORY), False),
        (Stores.window("s", size_ms=1, retention_ms=1, persistent=False, supplier=SQLITE), True),
    ],
)
def test_persistent_property(spec, persistent):
    assert spec.persistent is persistent


@pytest.mark.parametrize(
    ("spec", "engine"),
    [
        (Stores.persistent("s"), "rocksdb"),
        (Stores.in_memory("s"), "memory"),
        (Stores.lru_map("s", 1), "lru"),
        (Stores.window("s", size_ms=1, retention_ms=1), "rocksdb"),
        (Stores.window("s", size_ms=1, retention_ms=1, persistent=False), "memory"),
        (Stores.custom("s", SQLITE), "sqlite"),
        (Stores.window("s", size_ms=1, retention_ms=1, supplier=STAGING_MEMORY), "staging-memory"),
    ],
)
def test_engine_property(spec, engine):
    assert spec.engine == engine


def test_fluent_methods_return_new_specs_and_leave_the_original_alone():
    base = Stores.persistent("s")
    snapshot = pickle.dumps(base)
    derived = [
        base.with_serdes("str", "int"),
        base.with_logging_disabled(),
        base.with_logging_enabled({"segment.ms": "1000"}),
        base.with_caching_enabled(),
        base.with_caching_disabled(),
    ]
    for spec in derived:
        assert spec is not base
        assert isinstance(spec, StoreSpec)
    assert pickle.dumps(base) == snapshot
    assert base.logging_enabled and base.caching_max_bytes == 0

    serdes, disabled, enabled, cached, uncached = derived
    assert (serdes.key_serde, serdes.value_serde) == ("str", "int")
    assert disabled.logging_enabled is False
    assert enabled.logging_enabled is True and enabled.topic_configs == {"segment.ms": "1000"}
    assert cached.caching_max_bytes == 10 * 1024 * 1024
    assert uncached.caching_max_bytes == 0
    assert base.with_caching_enabled(123).caching_max_bytes == 123


def test_fluent_methods_chain():
    spec = (
        Stores.persistent("s")
        .with_serdes("str", "json")
        .with_caching_enabled(1000)
        .with_logging_disabled()
        .with_logging_enabled({"a": "b"})
        .with_caching_disabled()
    )
    assert spec == StoreSpec(
        name="s", kind="rocksdb", key_serde="str", value_serde="json", topic_configs={"a": "b"}
    )


def test_with_logging_enabled_copies_the_configs():
    configs = {"min.insync.replicas": "2"}
    spec = Stores.persistent("s").with_logging_enabled(configs)
    configs["min.insync.replicas"] = "3"
    assert spec.topic_configs == {"min.insync.replicas": "2"}
    assert Stores.persistent("s").with_logging_enabled().topic_configs == {}


def test_with_retention_only_applies_to_windows():
    window = Stores.window("w", size_ms=10, retention_ms=100)
    assert window.with_retention(500).retention_ms == 500
    assert window.retention_ms == 100
    for spec in (
        Stores.persistent("s"),
        Stores.in_memory("m"),
        Stores.lru_map("l", 1),
        Stores.custom("c", SQLITE),
    ):
        with pytest.raises(InvalidStoreConfigError, match="retention applies to window stores"):
            spec.with_retention(100)


@pytest.mark.parametrize("name", ["", "a/b", "/abs", ".hidden", ".", ".."])
def test_invalid_store_names(name):
    with pytest.raises(InvalidStoreConfigError, match="invalid store name"):
        Stores.persistent(name)


def test_negative_cache_size_is_rejected():
    with pytest.raises(InvalidStoreConfigError, match="cache size must be >= 0"):
        Stores.persistent("s").with_caching_enabled(-1)


def test_window_spec_needs_size_and_retention():
    with pytest.raises(InvalidStoreConfigError, match="needs size and retention"):
        StoreSpec(name="w", kind="window", window_size_ms=10)
    with pytest.raises(InvalidStoreConfigError, match="needs size and retention"):
        StoreSpec(name="w", kind="window", retention_ms=10)


@pytest.mark.parametrize(
    "spec",
    [
        Stores.persistent("s"),
        Stores.in_memory("s"),
        Stores.lru_map("s", 2),
        Stores.custom("s", SQLITE),
    ],
)
def test_key_value_changelogs_are_compacted_with_a_day_of_compaction_lag(spec):
    assert spec.changelog_topic_configs() == {
        "cleanup.policy": "compact",
        "min.compaction.lag.ms": str(DAY_MS),
    }


def test_window_changelogs_are_compacted_and_expire_a_day_after_retention():
    spec = Stores.window("w", size_ms=60_000, retention_ms=3_600_000)
    assert WINDOW_CHANGELOG_EXTRA_RETENTION_MS == DAY_MS
    assert spec.changelog_topic_configs() == {
        "cleanup.policy": "compact,delete",
        "min.compaction.lag.ms": str(DAY_MS),
        "retention.ms": str(3_600_000 + DAY_MS),
    }


def test_window_changelog_retention_follows_with_retention():
    spec = Stores.window("w", size_ms=10, retention_ms=100).with_retention(5_000)
    assert spec.changelog_topic_configs()["retention.ms"] == str(5_000 + DAY_MS)


def test_user_topic_configs_override_and_extend():
    kv = Stores.persistent("s").with_logging_enabled(
        {"cleanup.policy": "compact,delete", "min.insync.replicas": "2"}
    )
    assert kv.changelog_topic_configs() == {
        "cleanup.policy": "compact,delete",
        "min.compaction.lag.ms": str(DAY_MS),
        "min.insync.replicas": "2",
    }
    window = Stores.window("w", size_ms=10, retention_ms=100).with_logging_enabled(
        {"retention.ms": "-1", "segment.bytes": "1048576"}
    )
    assert window.changelog_topic_configs() == {
        "cleanup.policy": "compact,delete",
        "min.compaction.lag.ms": str(DAY_MS),
        "retention.ms": "-1",
        "segment.bytes": "1048576",
    }


def test_changelog_topic_configs_returns_a_fresh_dict():
    spec = Stores.persistent("s").with_logging_enabled({"a": "1"})
    spec.changelog_topic_configs()["a"] = "mutated"
    assert spec.changelog_topic_configs()["a"] == "1"


def layers(store) -> list[type]:
    found, layer = [], store.wrapped
    while layer is not None:
        found.append(type(layer))
        layer = getattr(layer, "wrapped", None) or getattr(layer, "inner", None)
    return found


def _sink(_key, _value) -> None:
    pass


@pytest.mark.parametrize(
    ("spec", "sink", "expected"),
    [
        (
            Stores.persistent("s"),
            _sink,
            [ChangeLoggingKeyValueStore, ReadCachingKeyValueStore, RocksDBKeyValueStore],
        ),
        (Stores.persistent("s"), None, [ReadCachingKeyValueStore, RocksDBKeyValueStore]),
        (Stores.persistent("s").with_read_cache(0), None, [RocksDBKeyValueStore]),
        (Stores.in_memory("s").with_logging_disabled(), _sink, [InMemoryKeyValueStore]),
        (Stores.lru_map("s", 3), _sink, [ChangeLoggingKeyValueStore, LRUKeyValueStore]),
        (
            Stores.persistent("s").with_caching_enabled(100),
            _sink,
            [
                CachingKeyValueStore,
                ChangeLoggingKeyValueStore,
                ReadCachingKeyValueStore,
                RocksDBKeyValueStore,
            ],
        ),
        (
            Stores.in_memory("s").with_caching_enabled(100).with_logging_disabled(),
            _sink,
            [CachingKeyValueStore, InMemoryKeyValueStore],
        ),
        (
            Stores.window("s", size_ms=1, retention_ms=1),
            _sink,
            [ChangeLoggingWindowStore, WindowBytesStore, RocksDBKeyValueStore],
        ),
        (
            Stores.window("s", size_ms=1, retention_ms=1, persistent=False),
            None,
            [WindowBytesStore, InMemoryKeyValueStore],
        ),
        # A custom store gets the same layers, without the RocksDB read cache.
        (Stores.custom("s", SQLITE), _sink, [ChangeLoggingKeyValueStore, SQLiteKeyValueStore]),
        (Stores.custom("s", SQLITE), None, [SQLiteKeyValueStore]),
        (
            Stores.custom("s", STAGING_MEMORY).with_caching_enabled(100),
            _sink,
            [CachingKeyValueStore, ChangeLoggingKeyValueStore, StagingMemoryStore],
        ),
        (
            Stores.window("s", size_ms=1, retention_ms=1, supplier=SQLITE),
            _sink,
            [ChangeLoggingWindowStore, WindowBytesStore, SQLiteKeyValueStore],
        ),
        (
            Stores.window("s", size_ms=1, retention_ms=1, supplier=STAGING_MEMORY),
            None,
            [WindowBytesStore, StagingMemoryStore],
        ),
    ],
)
def test_build_store_layer_stack(tmp_path, spec, sink, expected):
    store = build_store(spec, tmp_path / "s", sink)
    try:
        assert isinstance(store, WindowStore if spec.kind == "window" else KeyValueStore)
        assert layers(store) == expected
        assert store.name == "s"
        assert store.persistent is spec.persistent
    finally:
        store.close()


def test_build_store_with_logging_disabled_never_calls_the_sink(tmp_path):
    records = []
    store = build_store(
        Stores.in_memory("s").with_logging_disabled(), tmp_path, lambda k, v: records.append(k)
    )
    store.put(b"k", b"v")
    store.delete(b"k")
    assert records == []


def test_build_store_resolves_serdes(tmp_path):
    store = build_store(Stores.in_memory("s").with_serdes("int", JsonSerde()), tmp_path, None)
    store.put(7, {"a": [1]})
    assert store.wrapped.get(IntSerde().serialize(7)) == b'{"a":[1]}'


def test_build_store_rejects_unknown_serde_names(tmp_path):
    with pytest.raises(SerdeError, match="unknown serde 'avro'"):
        build_store(Stores.in_memory("s").with_serdes("str", "avro"), tmp_path, None)


def test_built_lru_store_honours_capacity(tmp_path):
    store = build_store(Stores.lru_map("s", 2), tmp_path, None)
    for k in (b"a", b"b", b"c"):
        store.put(k, k)
    assert [k for k, _ in store.all()] == [b"b", b"c"]
