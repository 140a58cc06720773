"""RocksDB store: writes staged until commit, atomic metadata, restore, wipe, corruption."""

from __future__ import annotations

import os
import shutil

import pytest
import rocksdict

from statekeeper.errors import StoreClosedError, StoreCorruptError
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.rocksdb import META_CF, RocksDBKeyValueStore

META = StoreMetadata(changelog_offset=41, batch_id=7, source_offsets={"in:0": 100, "in:3": 5})


@pytest.fixture
def path(tmp_path):
    return tmp_path / "task_0_0" / "counts"


@pytest.fixture
def open_store(path):
    opened: list[RocksDBKeyValueStore] = []

    def _open() -> RocksDBKeyValueStore:
        store = RocksDBKeyValueStore("counts", path)
        opened.append(store)
        return store

    yield _open
    for store in opened:
        store.close()


def reopen(store, open_store):
    store.close()
    return open_store()


def test_store_is_persistent_and_creates_its_directory(open_store, path):
    store = open_store()
    assert store.persistent is True
    assert path.is_dir()


def test_writes_are_staged_until_commit(open_store):
    store = open_store()
    store.put(b"k", b"v")
    store.put_all([(b"x", b"1"), (b"y", b"2")])
    assert store.get(b"k") == b"v"  # visible to the writer before commit
    store = reopen(store, open_store)
    assert store.get(b"k") is None
    assert list(store.all()) == []
    assert store.read_metadata() == StoreMetadata()


def test_commit_makes_data_and_metadata_durable_together(open_store):
    store = open_store()
    store.put(b"k", b"v")
    store.put_all([(b"x", b"1"), (b"y", b"2")])
    store.commit(META)
    assert store.read_metadata() == META
    store = reopen(store, open_store)
    assert list(store.all()) == [(b"k", b"v"), (b"x", b"1"), (b"y", b"2")]
    assert store.read_metadata() == META


def test_tombstone_is_staged_until_commit(open_store):
    store = open_store()
    store.put(b"k", b"v")
    store.commit(META)
    store.put(b"k", None)
    assert store.get(b"k") is None
    store = reopen(store, open_store)
    assert store.get(b"k") == b"v"
    store.put(b"k", None)
    store.commit(META)
    store = reopen(store, open_store)
    assert store.get(b"k") is None


def test_later_commit_replaces_metadata(open_store):
    store = open_store()
    store.commit(META)
    newer = StoreMetadata(changelog_offset=50, batch_id=8, source_offsets={"in:0": 120})
    store.commit(newer)
    store = reopen(store, open_store)
    assert store.read_metadata() == newer


def test_discard_drops_staged_writes_only(open_store):
    store = open_store()
    store.put_all([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])
    store.commit(META)
    store.put(b"a", b"changed")
    store.put(b"b", None)
    store.put(b"new", b"n")
    store.delete_range(b"c", b"d")
    store.discard()
    assert list(store.all()) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert store.get_many([b"a", b"b", b"c", b"new"]) == [b"1", b"2", b"3", None]
    store.commit(META)  # nothing left to apply
    store = reopen(store, open_store)
    assert list(store.all()) == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]


def test_delete_range_is_staged_then_committed(open_store):
    store = open_store()
    store.put_all([(b"a", b"1"), (b"b1", b"2"), (b"b2", b"3"), (b"c", b"4")])
    store.commit(META)
    store.delete_range(b"b", b"c")  # end is exclusive
    assert store.get(b"b1") is None
    assert store.get_many([b"b1", b"b2", b"c"]) == [None, None, b"4"]
    assert list(store.all()) == [(b"a", b"1"), (b"c", b"4")]
    assert list(store.range(None, None, reverse=True)) == [(b"c", b"4"), (b"a", b"1")]

    staged_only = reopen(store, open_store)
    assert staged_only.get(b"b1") == b"2"  # the range delete was never committed

    staged_only.delete_range(b"b", b"c")
    staged_only.commit(META)
    store = reopen(staged_only, open_store)
    assert list(store.all()) == [(b"a", b"1"), (b"c", b"4")]


def test_delete_range_drops_staged_puts_in_range_but_later_puts_survive(open_store):
    store = open_store()
    store.put_all([(b"b1", b"old"), (b"b5", b"old")])
    store.commit(META)
    store.put(b"b2", b"staged-before")
    store.delete_range(b"b", b"c")
    store.put(b"b3", b"staged-after")
    assert list(store.all()) == [(b"b3", b"staged-after")]
    store.commit(META)
    store = reopen(store, open_store)
    assert list(store.all()) == [(b"b3", b"staged-after")]


def test_range_merges_uncommitted_overlay_with_database(open_store):
    store = open_store()
    store.put_all([(b"a", b"1"), (b"c", b"3"), (b"e", b"5"), (b"g", b"7")])
    store.commit(META)
    store.put(b"b", b"2")  # new key between committed ones
    store.put(b"c", None)  # tombstone over a committed key
    store.put(b"e", b"55")  # overwrite
    store.put(b"h", b"8")  # after the last committed key
    expected = [(b"a", b"1"), (b"b", b"2"), (b"e", b"55"), (b"g", b"7"), (b"h", b"8")]
    assert list(store.all()) == expected
    assert list(store.range(None, None, reverse=True)) == expected[::-1]
    assert list(store.range(b"b", b"g")) == expected[1:4]
    assert list(store.range(b"b", b"g", reverse=True)) == expected[1:4][::-1]
    assert list(store.prefix_scan(b"e")) == [(b"e", b"55")]
    store.commit(META)
    store = reopen(store, open_store)
    assert list(store.all()) == expected


def test_restore_batch_writes_data_and_metadata_directly(open_store):
    store = open_store()
    store.put(b"gone", b"x")
    store.commit(META)
    restored_meta = StoreMetadata(changelog_offset=99, batch_id=12, source_offsets={"in:0": 7})
    store.restore_batch([(b"r1", b"1"), (b"r2", b"2"), (b"gone", None)], restored_meta)
    store = reopen(store, open_store)  # no commit in between
    assert list(store.all()) == [(b"r1", b"1"), (b"r2", b"2")]
    assert store.read_metadata() == restored_meta


def test_restore_batch_without_metadata_keeps_committed_metadata(open_store):
    store = open_store()
    store.commit(META)
    store.restore_batch([(b"k", b"v")], None)
    store = reopen(store, open_store)
    assert store.get(b"k") == b"v"
    assert store.read_metadata() == META


def test_metadata_with_empty_source_offsets_roundtrips(open_store):
    store = open_store()
    meta = StoreMetadata(changelog_offset=0, batch_id=0, source_offsets={})
    store.commit(meta)
    store = reopen(store, open_store)
    assert store.read_metadata() == meta


def test_wipe_empties_store_and_metadata_durably(open_store, path):
    store = open_store()
    store.put_all([(b"a", b"1"), (b"b", b"2")])
    store.commit(META)
    store.put(b"staged", b"s")
    store.wipe()
    assert list(store.all()) == []
    assert store.read_metadata() == StoreMetadata()
    assert path.is_dir()
    store.put(b"after", b"wipe")
    store.commit(StoreMetadata(batch_id=1))
    store = reopen(store, open_store)
    assert list(store.all()) == [(b"after", b"wipe")]
    assert store.read_metadata() == StoreMetadata(batch_id=1)


def test_close_is_idempotent_and_drops_staged_writes(open_store):
    store = open_store()
    store.put(b"k", b"v")
    store.close()
    store.close()
    with pytest.raises(StoreClosedError, match="'counts' is closed"):
        store.get(b"k")
    with pytest.raises(StoreClosedError):
        store.commit(META)
    with pytest.raises(StoreClosedError):
        store.read_metadata()
    with pytest.raises(StoreClosedError):
        store.get_many([b"k"])


def test_close_releases_the_lock_so_the_store_reopens(open_store):
    store = open_store()
    for _ in range(3):
        store = reopen(store, open_store)
    assert store.get(b"k") is None


def _committed_store(path) -> None:
    store = RocksDBKeyValueStore("counts", path)
    store.put_all([(b"k%d" % i, b"v" * 100) for i in range(100)])
    store.commit(META)
    store.close()


def test_garbage_current_file_raises_store_corrupt_error(path):
    _committed_store(path)
    (path / "CURRENT").write_bytes(b"\x00\x01garbage")
    with pytest.raises(StoreCorruptError, match="'counts'") as info:
        RocksDBKeyValueStore("counts", path)
    assert str(path) in str(info.value)


def test_every_file_overwritten_with_garbage_raises_store_corrupt_error(path):
    _committed_store(path)
    rng_bytes = os.urandom(4096)
    files = [p for p in path.iterdir() if p.is_file()]
    assert files
    for file in files:
        file.write_bytes(rng_bytes)
    with pytest.raises(StoreCorruptError, match="unreadable"):
        RocksDBKeyValueStore("counts", path)


def test_corrupt_store_can_be_rebuilt_after_removing_its_directory(path):
    _committed_store(path)
    (path / "CURRENT").write_bytes(b"garbage")
    with pytest.raises(StoreCorruptError):
        RocksDBKeyValueStore("counts", path)
    shutil.rmtree(path)
    store = RocksDBKeyValueStore("counts", path)
    try:
        assert list(store.all()) == []
    finally:
        store.close()


def _write_raw_metadata(path, key: bytes, value: bytes) -> None:
    opts = rocksdict.Options(raw_mode=True)
    db = rocksdict.Rdict(
        str(path), opts, column_families={META_CF: rocksdict.Options(raw_mode=True)}
    )
    meta = db.get_column_family(META_CF)
    meta[key] = value
    meta.close()
    db.close()
    del meta, db


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b"changelog_offset", b"not-a-number"),
        (b"batch_id", b"1.5"),
        (b"source_offsets", b"{not json"),
        (b"source_offsets", b"[1, 2]"),
        (b"source_offsets", b'{"in:0": "x"}'),
    ],
)
def test_unreadable_metadata_raises_store_corrupt_error(path, key, value):
    _committed_store(path)
    _write_raw_metadata(path, key, value)
    with pytest.raises(StoreCorruptError, match="has unreadable metadata"):
        RocksDBKeyValueStore("counts", path)
