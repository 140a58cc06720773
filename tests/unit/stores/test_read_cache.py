"""Read cache over a real RocksDB store: reads equal the uncached store's, the budget holds."""

from __future__ import annotations

import random

import pytest

from statekeeper.errors import InvalidStoreConfigError
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import DEFAULT_READ_CACHE_BYTES, Stores, build_store
from statekeeper.stores.change_logging import ChangeLoggingKeyValueStore
from statekeeper.stores.read_cache import ENTRY_OVERHEAD, ReadCachingKeyValueStore
from statekeeper.stores.rocksdb import RocksDBKeyValueStore


def meta(batch: int) -> StoreMetadata:
    return StoreMetadata(changelog_offset=batch, batch_id=batch, source_offsets={"in:0": batch})


@pytest.fixture
def stores(tmp_path):
    opened = []

    def _open(name: str, max_bytes: int = 1_000_000):
        inner = RocksDBKeyValueStore(name, tmp_path / name)
        store = ReadCachingKeyValueStore(inner, max_bytes)
        opened.append(store)
        return store, inner

    yield _open
    for store in opened:
        store.close()


def test_persistent_key_value_stores_get_the_cache_under_change_logging(tmp_path):
    store = build_store(Stores.persistent("a"), tmp_path / "a", lambda k, v: None)
    try:
        logging = store.wrapped
        assert isinstance(logging, ChangeLoggingKeyValueStore)
        assert isinstance(logging.wrapped, ReadCachingKeyValueStore)
        assert logging.wrapped.max_bytes == DEFAULT_READ_CACHE_BYTES
        assert isinstance(logging.wrapped.wrapped, RocksDBKeyValueStore)
    finally:
        store.close()
    off = build_store(Stores.persistent("b").with_read_cache(0), tmp_path / "b", None)
    try:
        assert isinstance(off.wrapped, RocksDBKeyValueStore)
    finally:
        off.close()
    memory = build_store(Stores.in_memory("c"), tmp_path / "c", None)
    assert not isinstance(memory.wrapped, ReadCachingKeyValueStore)
    with pytest.raises(InvalidStoreConfigError, match="read cache size"):
        Stores.persistent("d").with_read_cache(-1)


def test_second_read_is_a_hit_and_absent_keys_are_cached_too(stores):
    store, inner = stores("s")
    inner.put(b"a", b"1")
    inner.commit(meta(1))
    assert store.get_many([b"a", b"b"]) == [b"1", None]
    assert (store.hits, store.misses) == (0, 2)
    assert store.get_many([b"b", b"a"]) == [None, b"1"]
    assert store.get(b"a") == b"1"
    assert (store.hits, store.misses) == (3, 2)
    store.put(b"b", b"2")  # a cached absence is replaced by the write
    assert store.get(b"b") == b"2"
    store.put_all([(b"a", None), (b"c", b"3")])
    assert store.get_many([b"a", b"b", b"c"]) == [None, b"2", b"3"]


def test_discard_drops_staged_values_from_the_cache(stores):
    store, _ = stores("s")
    store.put_all([(b"k", b"committed")])
    store.commit(meta(1))
    store.put(b"k", b"staged")
    assert store.get(b"k") == b"staged"
    store.discard()
    assert store.get(b"k") == b"committed"


def test_restore_and_range_delete_are_seen_by_later_reads(stores):
    store, _ = stores("s")
    store.put_all([(b"k1", b"1"), (b"k2", b"2"), (b"x", b"9")])
    store.commit(meta(1))
    assert store.get_many([b"k1", b"k2", b"x"]) == [b"1", b"2", b"9"]
    store.restore_batch([(b"k1", b"restored"), (b"x", None)], meta(2))
    assert store.get_many([b"k1", b"x"]) == [b"restored", None]
    store.delete_range(b"k", b"l")
    assert store.get_many([b"k1", b"k2"]) == [None, None]
    store.commit(meta(3))
    assert store.get_many([b"k1", b"k2"]) == [None, None]


def test_the_budget_holds_and_the_oldest_entries_go_first(stores):
    budget = 50 * (ENTRY_OVERHEAD + 12)
    store, inner = stores("s", max_bytes=budget)
    for batch in range(10):
        store.put_all([(b"key%05d" % (batch * 20 + i), b"val") for i in range(20)])
        store.commit(meta(batch))
        cached = store._cache
        exact = sum(len(k) + len(v or b"") + ENTRY_OVERHEAD for k, v in cached.items())
        assert exact <= budget
    newest = b"key%05d" % 199
    assert newest in store._cache and b"key00000" not in store._cache
    # Evicted keys are read from RocksDB again.
    assert store.get(b"key00000") == b"val"
    assert inner.get(b"key00000") == b"val"


def test_random_operations_read_the_same_as_the_uncached_store(stores):
    """Every read through a small cache equals the same read on a plain RocksDB store that
    saw the same operations (evictions, discards, restores and range deletes included)."""
    rng = random.Random(11)
    cached, _ = stores("cached", max_bytes=40 * (ENTRY_OVERHEAD + 8))
    plain = RocksDBKeyValueStore("plain", cached.wrapped.path.parent / "plain")
    keys = [b"k%03d" % i for i in range(120)]

    def value() -> bytes | None:
        return None if rng.random() < 0.15 else b"%d" % rng.randrange(1000)

    try:
        for step in range(3000):
            op = rng.random()
            if op < 0.3:
                sample = rng.sample(keys, rng.randrange(1, 30))
                assert cached.get_many(sample) == plain.get_many(sample), step
            elif op < 0.45:
                key = rng.choice(keys)
                assert cached.get(key) == plain.get(key), step
            elif op < 0.75:
                items = [(rng.choice(keys), value()) for _ in range(rng.randrange(1, 20))]
                cached.put_all(items)
                plain.put_all(items)
            elif op < 0.85:
                key, v = rng.choice(keys), value()
                cached.put(key, v)
                plain.put(key, v)
            elif op < 0.92:
                cached.commit(meta(step))
                plain.commit(meta(step))
            elif op < 0.96:
                cached.discard()
                plain.discard()
            elif op < 0.98:
                lo = rng.choice(keys)
                hi = lo[:-1] + bytes([lo[-1] + 1])
                cached.delete_range(lo, hi)
                plain.delete_range(lo, hi)
            else:
                records = [(rng.choice(keys), value()) for _ in range(5)]
                cached.restore_batch(records, meta(step))
                plain.restore_batch(records, meta(step))
        assert cached.get_many(keys) == plain.get_many(keys)
        assert cached.hits > 0 and cached.misses > 0
    finally:
        plain.close()
