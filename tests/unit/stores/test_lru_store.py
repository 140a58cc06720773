"""LRU store: capacity, recency-based eviction, eviction listeners, restore trimming."""

from __future__ import annotations

import pytest

from statekeeper.errors import InvalidStoreConfigError
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import Stores
from statekeeper.stores.lru import LRUKeyValueStore


def keys(store):
    return [k for k, _ in store.all()]


@pytest.fixture
def evicted():
    return []


@pytest.fixture
def lru(evicted):
    store = LRUKeyValueStore("lru", capacity=3)
    store.add_eviction_listener(lambda k, v: evicted.append((k, v)))
    return store


@pytest.mark.parametrize("capacity", [0, -1, -100])
def test_capacity_below_one_is_rejected(capacity):
    with pytest.raises(InvalidStoreConfigError, match=f"capacity must be >= 1, got {capacity}"):
        LRUKeyValueStore("lru", capacity)


@pytest.mark.parametrize("capacity", [0, -1, None])
def test_spec_rejects_capacity_below_one(capacity):
    with pytest.raises(InvalidStoreConfigError, match="capacity >= 1"):
        Stores.lru_map("lru", capacity)


def test_capacity_one_keeps_only_the_last_key(lru):
    store = LRUKeyValueStore("one", 1)
    for k in (b"a", b"b", b"c"):
        store.put(k, k)
    assert list(store.all()) == [(b"c", b"c")]


def test_capacity_is_enforced(lru):
    for i in range(10):
        lru.put(b"k%d" % i, b"v%d" % i)
        assert lru.approximate_num_entries() <= 3
    assert keys(lru) == [b"k7", b"k8", b"k9"]


def test_evicts_least_recently_put_first(lru, evicted):
    for k in (b"a", b"b", b"c", b"d"):
        lru.put(k, k.upper())
    assert evicted == [(b"a", b"A")]
    assert keys(lru) == [b"b", b"c", b"d"]


def test_get_refreshes_recency(lru, evicted):
    for k in (b"a", b"b", b"c"):
        lru.put(k, k)
    assert lru.get(b"a") == b"a"
    lru.put(b"d", b"d")
    assert evicted == [(b"b", b"b")]
    lru.get_many([b"c"])
    lru.put(b"e", b"e")
    assert evicted == [(b"b", b"b"), (b"a", b"a")]
    assert keys(lru) == [b"c", b"d", b"e"]


def test_get_of_a_missing_key_changes_nothing(lru, evicted):
    for k in (b"a", b"b", b"c"):
        lru.put(k, k)
    assert lru.get(b"zzz") is None
    lru.put(b"d", b"d")
    assert evicted == [(b"a", b"a")]


def test_overwrite_refreshes_recency_without_evicting(lru, evicted):
    for k in (b"a", b"b", b"c"):
        lru.put(k, k)
    lru.put(b"a", b"new")
    assert evicted == []
    lru.put(b"d", b"d")
    assert evicted == [(b"b", b"b")]
    assert lru.get(b"a") == b"new"


def test_scans_do_not_refresh_recency(lru, evicted):
    for k in (b"a", b"b", b"c"):
        lru.put(k, k)
    assert list(lru.range(b"a", b"a")) == [(b"a", b"a")]
    assert list(lru.prefix_scan(b"a")) == [(b"a", b"a")]
    list(lru.all())
    lru.put(b"d", b"d")
    assert evicted == [(b"a", b"a")]


def test_put_if_absent_on_an_existing_key_refreshes_recency(lru, evicted):
    for k in (b"a", b"b", b"c"):
        lru.put(k, k)
    assert lru.put_if_absent(b"a", b"other") == b"a"
    lru.put(b"d", b"d")
    assert evicted == [(b"b", b"b")]


def test_delete_frees_a_slot_without_calling_listeners(lru, evicted):
    for k in (b"a", b"b", b"c"):
        lru.put(k, k)
    assert lru.delete(b"b") == b"b"
    lru.put(b"d", b"d")
    assert evicted == []
    assert keys(lru) == [b"a", b"c", b"d"]


def test_every_listener_is_called_with_the_evicted_key_and_value(evicted):
    store = LRUKeyValueStore("lru", 1)
    second: list[bytes] = []
    store.add_eviction_listener(lambda k, v: evicted.append((k, v)))
    store.add_eviction_listener(lambda k, _v: second.append(k))
    store.put(b"a", b"1")
    store.put(b"b", b"2")
    assert evicted == [(b"a", b"1")]
    assert second == [b"a"]


def test_iteration_is_in_key_order_not_recency_order(lru):
    for k in (b"c", b"a", b"b"):
        lru.put(k, k)
    assert keys(lru) == [b"a", b"b", b"c"]
    assert [k for k, _ in lru.range(None, None, reverse=True)] == [b"c", b"b", b"a"]


def test_restore_batch_does_not_evict_until_finish_restore(lru, evicted):
    records = [(b"k%d" % i, b"v%d" % i) for i in range(10)]
    lru.restore_batch(records[:6], None)
    lru.restore_batch(records[6:], StoreMetadata(changelog_offset=10))
    assert lru.approximate_num_entries() == 10
    lru.finish_restore()
    assert lru.approximate_num_entries() <= lru.capacity
    # The most recently restored keys survive; restore never reports evictions.
    assert keys(lru) == [b"k7", b"k8", b"k9"]
    assert evicted == []
    assert lru.read_metadata().changelog_offset == 10


def test_restore_batch_applies_tombstones_and_refreshes_rewritten_keys(lru):
    lru.restore_batch(
        [(b"a", b"1"), (b"b", b"2"), (b"c", b"3"), (b"d", b"4"), (b"a", b"1b"), (b"d", None)],
        None,
    )
    lru.finish_restore()
    assert list(lru.all()) == [(b"a", b"1b"), (b"b", b"2"), (b"c", b"3")]
    lru.put(b"e", b"5")  # b is now the least recently used
    assert keys(lru) == [b"a", b"c", b"e"]


def test_finish_restore_below_capacity_keeps_everything(lru):
    lru.restore_batch([(b"a", b"1"), (b"b", b"2")], None)
    lru.finish_restore()
    assert keys(lru) == [b"a", b"b"]
