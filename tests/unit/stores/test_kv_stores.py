"""The KeyValueBytesStore API, run over every store engine alike: the built-in in-memory,
LRU and RocksDB stores and the custom stores of tests/unit/stores/custom_suppliers.py (the
SQLite example and a non-persistent staging store), opened through their suppliers.

Engines that stage writes until commit run twice: once with every write still staged, and
once with the fixture data committed, so both read paths are exercised. A new engine gets
the whole suite by adding its kinds to KINDS (and its supplier to SUPPLIERS).
"""

from __future__ import annotations

import copy
import random

import pytest

from statekeeper.errors import StoreClosedError
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.lru import LRUKeyValueStore
from statekeeper.stores.memory import InMemoryKeyValueStore
from statekeeper.stores.rocksdb import RocksDBKeyValueStore

from .custom_suppliers import SQLiteStoreSupplier, StagingMemoryStoreSupplier

SUPPLIERS = {
    # No fsync: it only matters for power loss, which no test here can show (reopening
    # within the process sees the same); the default FULL runs in the other store tests.
    "sqlite": SQLiteStoreSupplier(synchronous="OFF"),
    "staging-memory": StagingMemoryStoreSupplier(),
}
KINDS = [
    "memory",
    "lru",
    "rocksdb-staged",
    "rocksdb-committed",
    "sqlite-staged",
    "sqlite-committed",
    "staging-memory-staged",
    "staging-memory-committed",
]
#: One kind per engine whose files outlive close() (the tests using it commit explicitly).
PERSISTENT_KINDS = ["rocksdb-committed", "sqlite-committed"]
#: One kind per engine that holds writes until commit (the built-in memory and LRU stores
#: write straight through and have nothing to discard).
STAGING_KINDS = [*PERSISTENT_KINDS, "staging-memory-committed"]
#: Engines whose supplier opens read-only views (open_read_only()).
VIEW_KINDS = ["sqlite-committed"]
DATA = [(b"a", b"1"), (b"ab", b"2"), (b"abc", b"3"), (b"b", b"4"), (b"c", b"5"), (b"\xff", b"6")]
#: Every StoreMetadata field set, so a store that drops one fails the round trip.
FULL_META = StoreMetadata(
    changelog_offset=41,
    batch_id=7,
    source_offsets={"in:0": 12, "in:1": 3},
    epoch=2,
    verified_offset=40,
)
#: A later commit: verified_offset back to None, a source partition no longer read.
LATER_META = StoreMetadata(changelog_offset=50, batch_id=8, source_offsets={"in:0": 13}, epoch=3)


class Harness:
    """A store plus a way to load data into it (committed or not, per kind) and reopen it."""

    def __init__(self, kind: str, tmp_path) -> None:
        self.kind = kind
        self.engine = kind.removesuffix("-staged").removesuffix("-committed")
        self.directory = tmp_path / "kv"
        self.store = self.open()

    def open(self):
        if self.engine == "memory":
            return InMemoryKeyValueStore("kv")
        if self.engine == "lru":
            return LRUKeyValueStore("kv", capacity=1000)
        if self.engine == "rocksdb":
            return RocksDBKeyValueStore("kv", self.directory)
        return SUPPLIERS[self.engine].get("kv", self.directory)

    def reopen(self) -> None:
        """Close the store and open it again from its directory (what a restart sees)."""
        self.store.close()
        self.store = self.open()

    def load(self, items) -> None:
        self.store.put_all(list(items))
        self.settle()

    def settle(self) -> None:
        if self.kind.endswith("-committed"):
            self.store.commit(StoreMetadata())


def _open_harness(request, tmp_path):
    h = Harness(request.param, tmp_path)
    yield h
    h.store.close()


@pytest.fixture(params=KINDS)
def harness(request, tmp_path):
    yield from _open_harness(request, tmp_path)


def _engine_id(kind: str) -> str:
    return kind.removesuffix("-committed")


@pytest.fixture(params=PERSISTENT_KINDS, ids=_engine_id)
def persistent_harness(request, tmp_path):
    yield from _open_harness(request, tmp_path)


@pytest.fixture(params=STAGING_KINDS, ids=_engine_id)
def staging_harness(request, tmp_path):
    yield from _open_harness(request, tmp_path)


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


def test_commit_and_read_metadata_round_trip_every_field(store):
    assert store.read_metadata() == StoreMetadata()
    meta = copy.deepcopy(FULL_META)
    store.commit(meta)
    assert store.read_metadata() == FULL_META
    # The store keeps its own copy and hands out copies: callers cannot change it.
    meta.source_offsets["in:0"] = 999
    store.read_metadata().source_offsets["in:0"] = 998
    assert store.read_metadata() == FULL_META
    # A later commit replaces every field (verified_offset None: a commit read back from the
    # changelog, and a source partition no longer read).
    store.commit(LATER_META)
    assert store.read_metadata() == LATER_META


def test_commit_makes_data_and_metadata_durable_together(persistent_harness):
    h = persistent_harness
    h.store.put_all(DATA)
    h.store.commit(FULL_META)
    h.reopen()
    assert list(h.store.all()) == sorted(DATA)
    assert h.store.read_metadata() == FULL_META


def _stage_edits(store) -> None:
    """A put of a new key, an overwrite, a delete and a range delete, none committed."""
    store.put(b"new", b"n")
    store.put(b"a", b"changed")
    store.delete(b"b")
    store.delete_range(b"ab", b"abd")


def test_staged_writes_are_not_durable_until_commit(persistent_harness):
    h = persistent_harness
    h.store.put_all(DATA)
    h.store.commit(FULL_META)
    _stage_edits(h.store)
    h.reopen()  # a crash before the next commit
    assert list(h.store.all()) == sorted(DATA)
    assert h.store.read_metadata() == FULL_META
    # The same writes, committed, survive.
    _stage_edits(h.store)
    h.store.commit(LATER_META)
    h.reopen()
    assert list(h.store.all()) == [
        (b"a", b"changed"),
        (b"c", b"5"),
        (b"new", b"n"),
        (b"\xff", b"6"),
    ]
    assert h.store.read_metadata() == LATER_META


def test_discard_drops_writes_staged_since_the_last_commit(staging_harness):
    h = staging_harness
    h.store.put_all(DATA)
    h.store.commit(FULL_META)
    _stage_edits(h.store)
    h.store.put_all([(b"c", None), (b"d", b"d")])
    h.store.discard()
    assert list(h.store.all()) == sorted(DATA)
    assert list(h.store.range(None, None, reverse=True)) == sorted(DATA, reverse=True)
    assert h.store.get_many([b"a", b"b", b"c", b"new", b"d"]) == [b"1", b"4", b"5", None, None]
    assert h.store.approximate_num_entries() == len(DATA)
    assert h.store.read_metadata() == FULL_META
    # Nothing discarded comes back with the next commit (the batch is re-run from scratch).
    h.store.put(b"rerun", b"r")
    h.store.commit(LATER_META)
    assert list(h.store.all()) == sorted([*DATA, (b"rerun", b"r")])
    if h.store.persistent:
        h.reopen()
        assert list(h.store.all()) == sorted([*DATA, (b"rerun", b"r")])


def test_discard_with_nothing_staged_changes_nothing(staging_harness):
    h = staging_harness
    h.store.discard()
    h.store.put_all(DATA)
    h.store.commit(FULL_META)
    h.store.discard()
    assert list(h.store.all()) == sorted(DATA)
    assert h.store.read_metadata() == FULL_META


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


def test_restore_batch_later_records_of_a_key_win(store):
    # A changelog batch holds every write of a key in order: the last one is the value.
    records = [(b"k", b"1"), (b"j", b"x"), (b"k", b"2"), (b"j", None), (b"i", None), (b"i", b"i")]
    store.restore_batch(records, FULL_META)
    store.finish_restore()
    assert list(store.all()) == [(b"i", b"i"), (b"k", b"2")]
    assert store.read_metadata() == FULL_META


def test_restored_records_and_metadata_survive_reopen(persistent_harness):
    # A restore writes straight to the store, without a commit: a crash right after it
    # must find what was restored and how far.
    h = persistent_harness
    h.store.restore_batch(DATA[:3], None)
    h.store.restore_batch([*DATA[3:], (b"a", None)], FULL_META)
    h.store.finish_restore()
    h.reopen()
    assert list(h.store.all()) == sorted(DATA[1:])
    assert h.store.read_metadata() == FULL_META


def test_wipe_drops_entries_and_metadata(harness):
    harness.load(DATA)
    harness.store.commit(StoreMetadata(changelog_offset=4, batch_id=2, source_offsets={"t:0": 1}))
    harness.store.put(b"staged", b"s")
    harness.store.wipe()
    assert harness.store.get(b"staged") is None
    assert list(harness.store.all()) == []
    assert harness.store.get(b"a") is None
    assert harness.store.read_metadata() == StoreMetadata()
    # Still usable afterwards.
    harness.load([(b"again", b"1")])
    assert harness.store.get(b"again") == b"1"


def test_wipe_is_durable(persistent_harness):
    h = persistent_harness
    h.store.put_all(DATA)
    h.store.commit(FULL_META)
    h.store.wipe()
    h.reopen()
    assert list(h.store.all()) == []
    assert h.store.read_metadata() == StoreMetadata()


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


@pytest.fixture(params=VIEW_KINDS, ids=_engine_id)
def view_harness(request, tmp_path):
    yield from _open_harness(request, tmp_path)


def open_view(h: Harness):
    return SUPPLIERS[h.engine].open_read_only("kv", h.directory)


def test_read_only_view_shows_the_last_commit_only(view_harness):
    h = view_harness
    h.store.put_all(DATA)
    h.store.commit(FULL_META)
    h.store.put(b"staged", b"s")
    h.store.delete(b"a")
    with open_view(h) as view:
        assert list(view.items()) == sorted(DATA)
        assert view.get(b"a") == b"1"
        assert view.get(b"staged") is None
        assert list(view.range(b"ab", b"b", reverse=True)) == [
            (b"b", b"4"),
            (b"abc", b"3"),
            (b"ab", b"2"),
        ]
        assert list(view.range(b"c", None)) == [(b"c", b"5"), (b"\xff", b"6")]
        assert view.approximate_num_entries() == len(DATA)
        assert view.read_metadata() == FULL_META
        assert view.is_current()


def test_read_only_view_does_not_change_under_its_reader(view_harness):
    h = view_harness
    h.store.put_all(DATA)
    h.store.commit(FULL_META)
    with open_view(h) as view:
        h.store.put(b"a", None)
        h.store.commit(LATER_META)
        assert not view.is_current()  # the live store moved on: open a new view for it
        assert list(view.items()) == sorted(DATA)
        assert view.read_metadata() == FULL_META
    with open_view(h) as view:
        assert list(view.items()) == sorted(DATA[1:])
        assert view.read_metadata() == LATER_META


def test_read_only_view_of_a_store_never_committed_is_empty(view_harness):
    with open_view(view_harness) as view:
        assert list(view.items()) == []
        assert view.read_metadata() == StoreMetadata()


def test_read_only_view_hands_out_copies_of_its_metadata(view_harness):
    h = view_harness
    h.store.commit(FULL_META)
    with open_view(h) as view:
        view.read_metadata().source_offsets["in:0"] = 0
        assert view.read_metadata() == FULL_META
