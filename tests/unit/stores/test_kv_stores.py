"""The KeyValueBytesStore API, run over the in-memory, LRU and RocksDB stores alike.

RocksDB runs twice: once with every write still staged in its uncommitted overlay, and once
with the fixture data committed to the database, so both read paths are exercised.
"""

from __future__ import annotations

import random

import pytest

from statekeeper.errors import StoreClosedError
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.lru import LRUKeyValueStore
from statekeeper.stores.memory import InMemoryKeyValueStore
from statekeeper.stores.rocksdb import RocksDBKeyValueStore

KINDS = ["memory", "lru", "rocksdb-staged", "rocksdb-committed"]
DATA = [(b"a", b"1"), (b"ab", b"2"), (b"abc", b"3"), (b"b", b"4"), (b"c", b"5"), (b"\xff", b"6")]


class Harness:
    """A store plus a way to load data into it (committed or not, per kind)."""

    def __init__(self, kind: str, tmp_path) -> None:
        self.kind = kind
        if kind == "memory":
            self.store = InMemoryKeyValueStore("kv")
        elif kind == "lru":
            self.store = LRUKeyValueStore("kv", capacity=1000)
        else:
            self.store = RocksDBKeyValueStore("kv", tmp_path / "kv")

    def load(self, items) -> None:
        self.store.put_all(list(items))
        self.settle()

    def settle(self) -> None:
        if self.kind == "rocksdb-committed":
            self.store.commit(StoreMetadata())


@pytest.fixture(params=KINDS)
def harness(request, tmp_path):
    h = Harness(request.param, tmp_path)
    yield h
    h.store.close()


@pytest.fixture
def store(harness):
    return harness.store


@pytest.fixture
def loaded(harness):
    harness.load(DATA)
    return harness.store


def test_get_missing_key_is_none(store):
    assert store.get(b"missing") is None


def test_put_then_get_and_overwrite(harness):
    store = harness.store
    store.put(b"k", b"v1")
    assert store.get(b"k") == b"v1"
    harness.settle()
    store.put(b"k", b"v2")
    assert store.get(b"k") == b"v2"
    harness.settle()
    assert store.get(b"k") == b"v2"


def test_empty_value_is_a_value_not_a_tombstone(harness):
    harness.load([(b"k", b"")])
    assert harness.store.get(b"k") == b""
    assert list(harness.store.all()) == [(b"k", b"")]


def test_put_none_is_a_tombstone(harness):
    store = harness.store
    harness.load(DATA)
    store.put(b"b", None)
    assert store.get(b"b") is None
    assert b"b" not in dict(store.all())
    harness.settle()
    assert store.get(b"b") is None
    assert b"b" not in dict(store.all())


def test_put_none_for_missing_key_is_harmless(harness):
    harness.store.put(b"never", None)
    harness.settle()
    assert harness.store.get(b"never") is None
    assert list(harness.store.all()) == []


def test_put_if_absent_writes_only_when_absent(harness):
    store = harness.store
    assert store.put_if_absent(b"k", b"first") is None
    assert store.get(b"k") == b"first"
    harness.settle()
    assert store.put_if_absent(b"k", b"second") == b"first"
    assert store.get(b"k") == b"first"


def test_put_if_absent_after_tombstone_writes(harness):
    harness.load([(b"k", b"old")])
    harness.store.put(b"k", None)
    assert harness.store.put_if_absent(b"k", b"new") is None
    assert harness.store.get(b"k") == b"new"


def test_delete_returns_old_value_and_removes(loaded, harness):
    assert loaded.delete(b"ab") == b"2"
    assert loaded.get(b"ab") is None
    assert loaded.delete(b"ab") is None
    harness.settle()
    assert loaded.get(b"ab") is None
    assert [k for k, _ in loaded.all()] == [b"a", b"abc", b"b", b"c", b"\xff"]


def test_delete_missing_key_returns_none(store):
    assert store.delete(b"missing") is None


def test_put_all_writes_every_item_including_tombstones(harness):
    harness.load(DATA)
    harness.store.put_all([(b"a", None), (b"new", b"n"), (b"c", b"55")])
    assert harness.store.get(b"a") is None
    assert harness.store.get(b"new") == b"n"
    assert harness.store.get(b"c") == b"55"


def test_all_is_in_key_order(loaded):
    assert list(loaded.all()) == sorted(DATA)


def test_range_bounds_are_inclusive(loaded):
    assert list(loaded.range(b"ab", b"b")) == [(b"ab", b"2"), (b"abc", b"3"), (b"b", b"4")]


def test_range_bounds_need_not_exist(loaded):
    assert list(loaded.range(b"aa", b"bb")) == [(b"ab", b"2"), (b"abc", b"3"), (b"b", b"4")]


def test_range_single_key(loaded):
    assert list(loaded.range(b"b", b"b")) == [(b"b", b"4")]


def test_range_none_bounds_are_unbounded(loaded):
    assert list(loaded.range(None, None)) == sorted(DATA)
    assert list(loaded.range(None, b"ab")) == [(b"a", b"1"), (b"ab", b"2")]
    assert list(loaded.range(b"c", None)) == [(b"c", b"5"), (b"\xff", b"6")]


def test_range_reverse(loaded):
    assert list(loaded.range(b"ab", b"b", reverse=True)) == [
        (b"b", b"4"),
        (b"abc", b"3"),
        (b"ab", b"2"),
    ]
    assert list(loaded.range(None, None, reverse=True)) == sorted(DATA, reverse=True)
    assert list(loaded.range(None, b"ab", reverse=True)) == [(b"ab", b"2"), (b"a", b"1")]
    assert list(loaded.range(b"c", None, reverse=True)) == [(b"\xff", b"6"), (b"c", b"5")]


def test_range_with_start_after_end_is_empty(loaded):
    assert list(loaded.range(b"c", b"a")) == []
    assert list(loaded.range(b"c", b"a", reverse=True)) == []


def test_range_on_empty_store(store):
    assert list(store.range(None, None)) == []
    assert list(store.range(b"a", b"z", reverse=True)) == []


def test_prefix_scan(loaded):
    assert list(loaded.prefix_scan(b"ab")) == [(b"ab", b"2"), (b"abc", b"3")]
    assert list(loaded.prefix_scan(b"a")) == [(b"a", b"1"), (b"ab", b"2"), (b"abc", b"3")]
    assert list(loaded.prefix_scan(b"\xff")) == [(b"\xff", b"6")]
    assert list(loaded.prefix_scan(b"zz")) == []
    assert list(loaded.prefix_scan(b"")) == sorted(DATA)


def test_prefix_scan_skips_tombstoned_keys(harness):
    harness.load(DATA)
    harness.store.put(b"ab", None)
    assert list(harness.store.prefix_scan(b"ab")) == [(b"abc", b"3")]


def test_get_many_preserves_order_and_reports_missing(loaded):
    assert loaded.get_many([b"c", b"missing", b"a", b"c"]) == [b"5", None, b"1", b"5"]
    assert loaded.get_many([]) == []


def test_get_many_sees_tombstones_and_fresh_writes(harness):
    harness.load(DATA)
    harness.store.put(b"a", None)
    harness.store.put(b"fresh", b"f")
    assert harness.store.get_many([b"a", b"fresh", b"b"]) == [None, b"f", b"4"]


def test_approximate_num_entries_counts_distinct_keys(harness):
    assert harness.store.approximate_num_entries() == 0
    harness.load([(b"k%03d" % i, b"v") for i in range(50)])
    assert harness.store.approximate_num_entries() == 50


def test_delete_range_excludes_end(harness):
    harness.load(DATA)
    harness.store.delete_range(b"ab", b"b")
    harness.settle()
    assert [k for k, _ in harness.store.all()] == [b"a", b"b", b"c", b"\xff"]


def test_commit_and_read_metadata(store):
    assert store.read_metadata() == StoreMetadata()
    meta = StoreMetadata(changelog_offset=7, batch_id=3, source_offsets={"in:0": 11, "in:1": 2})
    store.commit(meta)
    assert store.read_metadata() == meta
    # The store keeps its own copy.
    meta.source_offsets["in:0"] = 999
    assert store.read_metadata().source_offsets == {"in:0": 11, "in:1": 2}


def test_restore_batch_applies_absolute_values_and_metadata(harness):
    # Restores run on freshly opened stores: nothing is staged.
    harness.load(DATA)
    harness.store.commit(StoreMetadata())
    meta = StoreMetadata(changelog_offset=100, batch_id=9, source_offsets={"t:0": 5})
    harness.store.restore_batch([(b"a", b"restored"), (b"b", None), (b"z", b"26")], meta)
    harness.store.finish_restore()
    assert harness.store.get(b"a") == b"restored"
    assert harness.store.get(b"b") is None
    assert harness.store.get(b"z") == b"26"
    assert harness.store.read_metadata() == meta


def test_restore_batch_without_metadata_keeps_metadata(store):
    meta = StoreMetadata(changelog_offset=1, batch_id=1, source_offsets={})
    store.commit(meta)
    store.restore_batch([(b"k", b"v")], None)
    assert store.get(b"k") == b"v"
    assert store.read_metadata() == meta


def test_wipe_drops_entries_and_metadata(harness):
    harness.load(DATA)
    harness.store.commit(StoreMetadata(changelog_offset=4, batch_id=2, source_offsets={"t:0": 1}))
    harness.store.wipe()
    assert list(harness.store.all()) == []
    assert harness.store.get(b"a") is None
    assert harness.store.read_metadata() == StoreMetadata()
    # Still usable afterwards.
    harness.load([(b"again", b"1")])
    assert harness.store.get(b"again") == b"1"


def test_closed_store_fails_loudly(store):
    store.put(b"k", b"v")
    store.close()
    for op in (
        lambda: store.get(b"k"),
        lambda: store.put(b"k", b"v"),
        lambda: list(store.range(None, None)),
    ):
        with pytest.raises(StoreClosedError, match="'kv' is closed"):
            op()


def test_writes_during_a_scan_do_not_break_it(harness):
    harness.load(DATA)
    seen = []
    for key, _ in harness.store.range(None, None):
        seen.append(key)
        harness.store.put(key, None)
    assert seen == [k for k, _ in sorted(DATA)]
    assert list(harness.store.all()) == []


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_match_a_dict_model(harness, seed):
    rng = random.Random(seed)
    store, model = harness.store, {}
    keys = [bytes([a, b]) for a in b"\x00a\xff" for b in b"xyz"]
    for step in range(300):
        key = rng.choice(keys)
        op = rng.random()
        if op < 0.45:
            value = b"v%d" % step
            store.put(key, value)
            model[key] = value
        elif op < 0.6:
            assert store.delete(key) == model.pop(key, None)
        elif op < 0.7:
            assert store.put_if_absent(key, b"pia") == model.get(key)
            model.setdefault(key, b"pia")
        elif op < 0.8:
            assert store.get(key) == model.get(key)
        elif op < 0.9:
            lo, hi = sorted(rng.sample(keys, 2))
            reverse = rng.random() < 0.5
            expected = sorted(((k, v) for k, v in model.items() if lo <= k <= hi), reverse=reverse)
            assert list(store.range(lo, hi, reverse=reverse)) == expected
        else:
            harness.settle()
    assert list(store.all()) == sorted(model.items())
    assert store.get_many(keys) == [model.get(k) for k in keys]


@pytest.mark.parametrize("seed", range(4))
def test_random_put_all_batches_match_a_dict_model(harness, seed):
    """Batches of known and new keys, repeated keys (the last value wins) and tombstones, as
    aggregations and restores write them; key order must survive value-only batches."""
    rng = random.Random(seed)
    store, model = harness.store, {}
    keys = [b"k%03d" % i for i in range(60)]
    for step in range(40):
        known = list(model)
        pool = known if known and rng.random() < 0.5 else keys  # a batch of known keys only
        batch = []
        for n in range(rng.randint(1, 30)):
            value = None if rng.random() < 0.1 and step % 3 == 0 else b"v%d.%d" % (step, n)
            batch.append((rng.choice(pool), value))
        store.put_all(batch)
        for key, value in batch:
            if value is None:
                model.pop(key, None)
            else:
                model[key] = value
        if rng.random() < 0.3:
            harness.settle()
        assert store.get_many(keys) == [model.get(k) for k in keys]
        assert list(store.all()) == sorted(model.items())
