"""Caching layer: absorbs repeated writes, flushes on commit or when over max_bytes."""

from __future__ import annotations

import pytest

from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import Stores, build_store
from statekeeper.stores.caching import _ENTRY_OVERHEAD, CachingKeyValueStore
from statekeeper.stores.memory import InMemoryKeyValueStore

from .custom_suppliers import SQLiteStoreSupplier

META = StoreMetadata(changelog_offset=1, batch_id=1, source_offsets={"in:0": 1})


@pytest.fixture
def sink():
    return []


SQLITE = SQLiteStoreSupplier()
#: Persistent engines the cache is stacked on (custom: the SQLite example's supplier).
ENGINES = {"rocksdb": Stores.persistent, "sqlite": lambda name: Stores.custom(name, SQLITE)}


@pytest.fixture(params=list(ENGINES))
def build(request, tmp_path, sink):
    built = []

    def _build(max_bytes: int = 1_000_000, name: str = "s"):
        spec = ENGINES[request.param](name).with_caching_enabled(max_bytes)
        store = build_store(spec, tmp_path / name, lambda k, v: sink.append((k, v)))
        built.append(store)
        return store

    yield _build
    for store in built:
        store.close()


def cache_of(store) -> CachingKeyValueStore:
    assert isinstance(store.wrapped, CachingKeyValueStore)
    return store.wrapped


def test_build_store_puts_the_cache_on_top(build):
    cache = cache_of(build(max_bytes=1234))
    assert cache.max_bytes == 1234
    assert cache.persistent is True
    assert cache.name == "s"


def test_repeated_puts_before_flush_produce_one_record_with_the_last_value(build, sink):
    store = build()
    for i in range(10):
        store.put(b"k", b"v%d" % i)
    assert sink == []
    store.flush()
    assert sink == [(b"k", b"v9")]
    store.flush()  # nothing new
    assert sink == [(b"k", b"v9")]


def test_commit_flushes_each_dirty_key_once(build, sink):
    store = build()
    for i in range(5):
        store.put(b"a", b"a%d" % i)
        store.put(b"b", b"b%d" % i)
    store.commit(META)
    assert sorted(sink) == [(b"a", b"a4"), (b"b", b"b4")]


def test_put_then_delete_before_flush_logs_one_tombstone(build, sink):
    store = build()
    store.put(b"k", b"v")
    store.delete(b"k")
    store.commit(META)
    assert sink == [(b"k", None)]


def test_flush_when_over_max_bytes(build, sink):
    entry = len(b"k0") + len(b"v") + _ENTRY_OVERHEAD
    store = build(max_bytes=3 * entry - 1)
    store.put(b"k0", b"v")
    store.put(b"k1", b"v")
    assert sink == []
    store.put(b"k2", b"v")  # pushes the cache past max_bytes
    assert sorted(sink) == [(b"k0", b"v"), (b"k1", b"v"), (b"k2", b"v")]
    assert cache_of(store).flushes == 1
    store.put(b"k3", b"v")
    assert len(sink) == 3


def test_overwrites_do_not_grow_the_cache(build, sink):
    entry = len(b"k") + len(b"value") + _ENTRY_OVERHEAD
    store = build(max_bytes=entry)
    for _ in range(100):
        store.put(b"k", b"value")
    assert sink == []
    store.put(b"k", b"longer-value")  # now bigger than max_bytes
    assert sink == [(b"k", b"longer-value")]


def test_reads_see_cached_writes(build):
    store = build()
    store.put(b"a", b"1")
    store.put(b"b", b"2")
    assert store.get(b"a") == b"1"
    assert store.get_many([b"b", b"missing", b"a"]) == [b"2", None, b"1"]
    assert list(store.all()) == [(b"a", b"1"), (b"b", b"2")]
    assert list(store.prefix_scan(b"b")) == [(b"b", b"2")]


def test_range_merges_cache_and_store(build):
    store = build()
    store.put_all([(b"a", b"1"), (b"c", b"3"), (b"e", b"5")])
    store.commit(META)
    store.put(b"b", b"2")
    store.put(b"c", b"33")
    store.put(b"f", b"6")
    expected = [(b"a", b"1"), (b"b", b"2"), (b"c", b"33"), (b"e", b"5"), (b"f", b"6")]
    assert list(store.all()) == expected
    assert list(store.range(None, None, reverse=True)) == expected[::-1]
    assert list(store.range(b"b", b"e")) == expected[1:4]
    assert list(store.range(b"b", b"e", reverse=True)) == expected[1:4][::-1]


def test_tombstones_in_the_cache_hide_store_entries(build):
    store = build()
    store.put_all([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
    store.commit(META)
    store.delete(b"b")
    store.put(b"c", None)
    assert store.get(b"b") is None
    assert store.get_many([b"a", b"b", b"c"]) == [b"1", None, None]
    assert list(store.all()) == [(b"a", b"1")]
    assert list(store.range(None, None, reverse=True)) == [(b"a", b"1")]
    assert store.put_if_absent(b"b", b"again") is None


def test_committed_writes_survive_reopen(build, sink):
    store = build()
    store.put(b"k", b"v")
    store.commit(META)
    store.close()
    store = build()
    assert store.get(b"k") == b"v"
    assert store.read_metadata() == META


def test_discard_drops_cached_and_staged_writes(build, sink):
    store = build()
    store.put(b"keep", b"1")
    store.commit(META)
    sink.clear()
    store.put(b"keep", b"changed")
    store.put(b"new", b"n")
    store.discard()
    assert sink == []
    assert list(store.all()) == [(b"keep", b"1")]
    store.commit(META)
    assert sink == []


def test_close_drops_uncommitted_cache(build, sink):
    store = build()
    store.put(b"k", b"v")
    store.close()
    assert sink == []
    store = build()
    assert store.get(b"k") is None


def test_delete_range_flushes_then_deletes():
    inner = InMemoryKeyValueStore("m")
    cache = CachingKeyValueStore(inner, max_bytes=10_000)
    cache.put(b"a", b"1")
    cache.put(b"b", b"2")
    cache.put(b"c", b"3")
    cache.delete_range(b"a", b"c")
    assert list(cache.all()) == [(b"c", b"3")]
    assert list(inner.all()) == [(b"c", b"3")]


def test_hit_and_miss_counters():
    cache = CachingKeyValueStore(InMemoryKeyValueStore("m"), max_bytes=10_000)
    cache.put(b"a", b"1")
    cache.get(b"a")
    cache.get(b"b")
    cache.get_many([b"a", b"b", b"c"])
    assert (cache.hits, cache.misses) == (2, 3)


def test_wipe_drops_cache_and_store(build, sink):
    store = build()
    store.put(b"a", b"1")
    store.commit(META)
    store.put(b"b", b"2")
    store.wipe()
    assert list(store.all()) == []
    assert store.read_metadata() == StoreMetadata()
    store.flush()
    assert sink == [(b"a", b"1")]
