"""Change-logging layer: every write is sent to the changelog as an absolute value."""

from __future__ import annotations

import random

import pytest

from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import Stores, build_store
from statekeeper.stores.change_logging import RESERVED_KEY_PREFIX, ChangeLoggingKeyValueStore
from statekeeper.stores.lru import LRUKeyValueStore
from statekeeper.stores.memory import InMemoryKeyValueStore
from statekeeper.stores.window_bytes import changelog_window_key

from .custom_suppliers import SQLiteStoreSupplier, StagingMemoryStoreSupplier

RESERVED = b"\x00__statekeeper.commit"
#: The key-value specs the logging layer is stacked on (custom stores: from their supplier).
SPECS = {
    "memory": Stores.in_memory("s"),
    "rocksdb": Stores.persistent("s"),
    "sqlite": Stores.custom("s", SQLiteStoreSupplier()),
    "staging-memory": Stores.custom("s", StagingMemoryStoreSupplier()),
}


@pytest.fixture
def sink():
    return []


class BatchSink:
    """A sink with ``send_all`` (as the task's changelog sinks have): batches arrive whole."""

    def __init__(self, records: list) -> None:
        self.records = records

    def __call__(self, key, value) -> None:
        self.records.append((key, value))

    def send_all(self, items) -> None:
        self.records.extend(items)


@pytest.fixture(
    params=[(kind, sending) for sending in ("each", "all") for kind in SPECS], ids="-".join
)
def logged(request, tmp_path, sink):
    kind, sending = request.param
    spec = SPECS[kind]
    to_sink = BatchSink(sink) if sending == "all" else (lambda k, v: sink.append((k, v)))
    store = build_store(spec, tmp_path / "s", to_sink)
    yield store
    store.close()


def replay(records, store) -> None:
    """Restore a fresh store from changelog records (what a restore does, minus the broker)."""
    store.restore_batch(list(records), StoreMetadata())
    store.finish_restore()


def test_reserved_prefix_is_what_commit_markers_use():
    assert RESERVED_KEY_PREFIX == b"\x00__statekeeper."


def test_every_put_logs_key_and_absolute_value(logged, sink):
    logged.put(b"a", b"1")
    logged.put(b"a", b"2")
    logged.put(b"b", b"3")
    assert sink == [(b"a", b"1"), (b"a", b"2"), (b"b", b"3")]


def test_put_none_and_delete_log_tombstones(logged, sink):
    logged.put(b"a", b"1")
    logged.put(b"a", None)
    logged.put(b"b", b"2")
    assert logged.delete(b"b") == b"2"
    assert sink == [(b"a", b"1"), (b"a", None), (b"b", b"2"), (b"b", None)]


def test_put_if_absent_logs_only_when_it_writes(logged, sink):
    assert logged.put_if_absent(b"a", b"1") is None
    assert logged.put_if_absent(b"a", b"2") == b"1"
    assert sink == [(b"a", b"1")]


def test_put_all_logs_every_item(logged, sink):
    logged.put_all([(b"a", b"1"), (b"b", None), (b"c", b"3")])
    assert sink == [(b"a", b"1"), (b"b", None), (b"c", b"3")]


def test_reads_commit_and_flush_do_not_log(logged, sink):
    logged.put(b"a", b"1")
    sink.clear()
    logged.get(b"a")
    logged.get_many([b"a", b"b"])
    list(logged.all())
    list(logged.range(b"a", b"z", reverse=True))
    list(logged.prefix_scan(b"a"))
    logged.flush()
    logged.commit(StoreMetadata(batch_id=1))
    assert sink == []


def test_restore_is_not_logged(logged, sink):
    logged.restore_batch([(b"a", b"1"), (b"b", None)], StoreMetadata(changelog_offset=3))
    logged.finish_restore()
    assert sink == []
    assert logged.get(b"a") == b"1"


def test_delete_range_logs_a_tombstone_per_key_in_the_half_open_range(sink):
    store = ChangeLoggingKeyValueStore(InMemoryKeyValueStore("m"), lambda k, v: sink.append((k, v)))
    store.put_all([(b"a", b"1"), (b"b", b"2"), (b"b1", b"3"), (b"c", b"4")])
    sink.clear()
    store.delete_range(b"b", b"c")
    assert sink == [(b"b", None), (b"b1", None)]
    assert list(store.all()) == [(b"a", b"1"), (b"c", b"4")]


def test_replaying_the_changelog_rebuilds_the_same_state(logged, sink):
    rng = random.Random(7)
    for step in range(200):
        key = b"k%d" % rng.randrange(15)
        if rng.random() < 0.3:
            logged.delete(key)
        else:
            logged.put(key, b"v%d" % step)
    fresh = InMemoryKeyValueStore("fresh")
    replay(sink, fresh)
    assert list(fresh.all()) == list(logged.all())


def test_lru_evictions_are_logged_as_tombstones(tmp_path, sink):
    store = build_store(Stores.lru_map("l", 2), tmp_path / "l", lambda k, v: sink.append((k, v)))
    store.put(b"a", b"1")
    store.put(b"b", b"2")
    store.get(b"a")
    store.put(b"c", b"3")  # evicts b
    assert sink == [(b"a", b"1"), (b"b", b"2"), (b"b", None), (b"c", b"3")]
    assert [k for k, _ in store.all()] == [b"a", b"c"]


def test_evicted_lru_keys_do_not_come_back_on_restore(tmp_path, sink):
    store = build_store(Stores.lru_map("l", 3), tmp_path / "l", lambda k, v: sink.append((k, v)))
    rng = random.Random(3)
    for step in range(300):
        key = b"k%d" % rng.randrange(10)
        op = rng.random()
        if op < 0.5:
            store.put(key, b"v%d" % step)
        elif op < 0.8:
            store.get(key)
        else:
            store.delete(key)
    fresh = LRUKeyValueStore("fresh", 3)
    replay(sink, fresh)
    assert list(fresh.all()) == list(store.all())


def test_keys_evicted_within_put_all_do_not_come_back_on_restore(tmp_path, sink):
    store = build_store(Stores.lru_map("l", 2), tmp_path / "l", lambda k, v: sink.append((k, v)))
    store.put_all([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])  # a is evicted by c
    store.delete(b"b")
    assert [k for k, _ in store.all()] == [b"c"]
    fresh = LRUKeyValueStore("fresh", 2)
    replay(sink, fresh)
    assert list(fresh.all()) == list(store.all())


@pytest.mark.parametrize(
    "key", [RESERVED_KEY_PREFIX, RESERVED, RESERVED_KEY_PREFIX + b"anything-else"]
)
def test_reserved_keys_are_rejected_by_put(logged, sink, key):
    with pytest.raises(ValueError, match="reserved for changelog commit markers"):
        logged.put(key, b"v")
    with pytest.raises(ValueError, match="'s'"):
        logged.put(key, None)
    assert sink == []
    assert logged.get(key) is None


def test_reserved_keys_reject_the_whole_put_all_batch(logged, sink):
    with pytest.raises(ValueError, match="reserved"):
        logged.put_all([(b"ok", b"1"), (RESERVED, b"2")])
    assert sink == []
    assert logged.get(b"ok") is None


def test_keys_resembling_the_reserved_prefix_are_allowed(logged, sink):
    for key in (b"\x00__statekeeper", b"x\x00__statekeeper.y", b"__statekeeper.z"):
        logged.put(key, b"v")
    assert len(sink) == 3


def test_unlogged_stores_accept_reserved_keys(tmp_path):
    store = build_store(Stores.in_memory("s").with_logging_disabled(), tmp_path / "s", None)
    store.put(RESERVED, b"v")
    assert store.get(RESERVED) == b"v"


def test_reserved_keys_are_rejected_at_put_even_with_caching(tmp_path, sink):
    spec = Stores.persistent("s").with_caching_enabled(1_000_000)
    store = build_store(spec, tmp_path / "s", lambda k, v: sink.append((k, v)))
    try:
        with pytest.raises(ValueError, match="reserved"):
            store.put(RESERVED, b"v")
    finally:
        store.close()


def test_window_changelog_records_use_key_and_window_start(tmp_path, sink):
    spec = Stores.window("w", size_ms=10, retention_ms=1_000, persistent=False)
    store = build_store(spec, tmp_path / "w", lambda k, v: sink.append((k, v)))
    assert store.put(b"k", b"v", 20) is True
    store.put(b"k", None, 30)
    assert sink == [(changelog_window_key(b"k", 20), b"v"), (changelog_window_key(b"k", 30), None)]
    with pytest.raises(ValueError, match="reserved"):
        store.put(RESERVED, b"v", 40)
    assert len(sink) == 2
