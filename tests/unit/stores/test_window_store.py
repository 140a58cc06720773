"""Window store (built with Stores.window) over every segment engine alike: RocksDB,
in-memory and the custom stores of tests/unit/stores/custom_suppliers.py (the SQLite example
and a non-persistent staging store)."""

from __future__ import annotations

import pytest

from spark_apps.word_count_sqlite.sqlite_store import SQLiteKeyValueStore
from statekeeper.errors import ChangelogCorruptError, InvalidStoreConfigError
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import Stores, StoreSpec, build_store
from statekeeper.stores.window_bytes import (
    WindowBytesStore,
    changelog_window_key,
    split_changelog_window_key,
)

from .custom_suppliers import SQLiteStoreSupplier, StagingMemoryStore, StagingMemoryStoreSupplier

RETENTION = 1_000
SIZE = 100
META = StoreMetadata(changelog_offset=5, batch_id=2, source_offsets={"in:0": 9})
#: Stores.window arguments choosing what holds the segments.
SEGMENTS = {
    "rocksdb": {"persistent": True},
    "in-memory": {"persistent": False},
    "sqlite": {"supplier": SQLiteStoreSupplier()},
    "staging-memory": {"supplier": StagingMemoryStoreSupplier()},
}
#: Segment engines whose files outlive close().
PERSISTENT_SEGMENTS = ["rocksdb", "sqlite"]
#: Segment engines that hold writes until commit (in-memory segments write straight through).
STAGING_SEGMENTS = [*PERSISTENT_SEGMENTS, "staging-memory"]


def window_spec(segments: str, retention_ms: int = RETENTION) -> StoreSpec:
    return Stores.window("w", size_ms=SIZE, retention_ms=retention_ms, **SEGMENTS[segments])


@pytest.fixture(params=list(SEGMENTS))
def segments(request):
    return request.param


@pytest.fixture(params=PERSISTENT_SEGMENTS)
def persistent_segments(request):
    return request.param


@pytest.fixture(params=STAGING_SEGMENTS)
def staging_segments(request):
    return request.param


@pytest.fixture
def persistent(segments):
    return window_spec(segments).persistent


@pytest.fixture
def sink():
    return []


@pytest.fixture
def build(tmp_path, segments, sink):
    built = []

    def _build(retention_ms: int = RETENTION, *, logged: bool = True):
        spec = window_spec(segments, retention_ms).with_serdes("str", "int")
        store = build_store(
            spec, tmp_path / "w", (lambda k, v: sink.append((k, v))) if logged else None
        )
        built.append(store)
        return store

    yield _build
    for store in built:
        store.close()


def byte_store(store) -> WindowBytesStore:
    """The WindowBytesStore under the typed (and maybe change-logging) layers."""
    inner = store.wrapped
    while not isinstance(inner, WindowBytesStore):
        inner = inner.wrapped
    return inner


def raw_window_starts(store) -> list[int]:
    """Window starts physically present in the segments (the stream-time record excluded)."""
    bytes_store = byte_store(store)
    return sorted(
        bytes_store._split_store_key(k)[1]
        for k, _ in bytes_store.inner.all()
        if not k.startswith(b"\xff" * 8)
    )


def test_layers_and_persistence(build, persistent):
    store = build()
    assert store.persistent is persistent
    assert byte_store(store).inner.persistent is persistent


@pytest.mark.parametrize(
    ("segments", "engine_store"),
    [("sqlite", SQLiteKeyValueStore), ("staging-memory", StagingMemoryStore)],
)
def test_a_supplier_makes_the_segments(build, engine_store):
    store = build()
    assert type(byte_store(store).inner) is engine_store
    store.put("k", 1, 0)
    assert [v for k, v in byte_store(store).inner.all() if not k.startswith(b"\xff" * 8)] == [
        b"\x00" * 7 + b"\x01"
    ]


def test_put_and_fetch(build):
    store = build()
    assert store.observed_stream_time == -1
    assert store.put("k", 1, 0) is True
    assert store.put("k", 2, 100) is True
    assert store.put("other", 3, 100) is True
    assert store.fetch("k", 0) == 1
    assert store.fetch("k", 100) == 2
    assert store.fetch("other", 100) == 3
    assert store.fetch("k", 200) is None
    assert store.fetch("missing", 0) is None
    assert store.observed_stream_time == 100


def test_put_overwrites_and_none_deletes(build, sink):
    store = build()
    store.put("k", 1, 0)
    store.put("k", 5, 0)
    assert store.fetch("k", 0) == 5
    store.put("k", None, 0)
    assert store.fetch("k", 0) is None
    assert list(store.all()) == []


def test_negative_window_start_is_rejected(build):
    with pytest.raises(ValueError, match="window start must be >= 0"):
        build().put("k", 1, -1)


def test_fetch_range_is_inclusive_and_ordered(build):
    store = build()
    for start in (500, 100, 300, 0, 200):
        store.put("k", start, start)
    store.put("other", 9, 200)
    assert list(store.fetch_range("k", 100, 300)) == [(100, 100), (200, 200), (300, 300)]
    assert list(store.fetch_range("k", 0, 10_000)) == [(s, s) for s in (0, 100, 200, 300, 500)]
    assert list(store.fetch_range("k", 101, 199)) == []
    assert list(store.fetch_range("k", 300, 100)) == []
    assert list(store.fetch_range("missing", 0, 10_000)) == []


def test_keys_that_prefix_each_other_do_not_mix(build):
    store = build()
    store.put("a", 1, 100)
    store.put("ab", 2, 100)
    store.put("a\x00", 3, 100)
    assert list(store.fetch_range("a", 0, 1_000)) == [(100, 1)]
    assert list(store.fetch_range("ab", 0, 1_000)) == [(100, 2)]
    assert store.fetch("a", 100) == 1


def test_fetch_all_and_all(build):
    store = build()
    store.put("b", 1, 0)
    store.put("a", 2, 100)
    store.put("b", 3, 200)
    store.put("a", 4, 300)
    assert sorted(store.fetch_all(100, 200)) == [("a", 100, 2), ("b", 200, 3)]
    assert sorted(store.all()) == [("a", 100, 2), ("a", 300, 4), ("b", 0, 1), ("b", 200, 3)]
    assert list(store.fetch_all(301, 10_000)) == []
    assert list(store.fetch_all(200, 100)) == []


def test_expired_windows_are_dropped_by_put(build, sink):
    store = build()
    store.put("k", 1, 5_000)
    sink.clear()
    oldest_live = 5_000 - RETENTION + 1
    assert store.put("k", 2, oldest_live - 1) is False
    assert store.fetch("k", oldest_live - 1) is None
    assert sink == []  # a dropped record is not logged
    assert byte_store(store).expired_records_dropped == 1
    assert store.put("k", 3, oldest_live) is True  # the boundary is still live
    assert store.fetch("k", oldest_live) == 3
    assert store.observed_stream_time == 5_000


def test_late_but_live_windows_do_not_move_stream_time(build):
    store = build()
    store.put("k", 1, 900)
    store.put("k", 2, 400)
    assert store.observed_stream_time == 900
    assert store.fetch("k", 400) == 2


def test_expired_windows_are_hidden_by_reads(build):
    store = build()
    store.put("k", 0, 0)
    store.put("k", 500, 500)
    assert store.fetch("k", 0) == 0
    store.put("other", 1, RETENTION)  # oldest live start is now 1
    assert store.fetch("k", 0) is None
    assert store.fetch("k", 500) == 500
    assert list(store.fetch_range("k", 0, 10_000)) == [(500, 500)]
    assert sorted(store.all()) == [("k", 500, 500), ("other", RETENTION, 1)]
    assert sorted(store.fetch_all(0, 600)) == [("k", 500, 500)]


def test_whole_expired_segments_are_deleted(build):
    # retention 200 s -> segments of 100 s
    store = build(retention_ms=200_000, logged=False)
    assert byte_store(store).segment_interval_ms == 100_000
    store.put("k", 1, 0)
    store.put("k", 2, 150_000)
    assert raw_window_starts(store) == [0, 150_000]
    store.put("k", 3, 350_000)  # oldest live start 150_001: segment 0 is gone
    assert raw_window_starts(store) == [150_000, 350_000]
    assert list(store.fetch_range("k", 0, 1_000_000)) == [(350_000, 3)]
    store.commit(META)
    assert raw_window_starts(store) == [150_000, 350_000]


def test_approximate_num_entries_excludes_the_stream_time_record(build, persistent):
    store = build()
    assert store.approximate_num_entries() == 0
    store.put("a", 1, 0)
    store.put("b", 1, 0)
    store.commit(META)
    assert store.approximate_num_entries() == 2


def test_observed_stream_time_survives_commit_and_reopen(tmp_path, sink, persistent_segments):
    spec = window_spec(persistent_segments).with_serdes("str", "int")
    store = build_store(spec, tmp_path / "w", lambda k, v: sink.append((k, v)))
    store.put("k", 1, 4_000)
    store.commit(META)
    store.close()

    store = build_store(spec, tmp_path / "w", lambda k, v: sink.append((k, v)))
    try:
        assert store.observed_stream_time == 4_000
        assert store.fetch("k", 4_000) == 1
        assert store.read_metadata() == META
        assert store.put("k", 2, 4_000 - RETENTION) is False  # still expired after reopen
    finally:
        store.close()


def test_uncommitted_stream_time_is_lost_on_reopen(tmp_path, persistent_segments):
    spec = window_spec(persistent_segments)
    store = build_store(spec, tmp_path / "w", None)
    store.put(b"k", b"v", 100)
    store.commit(META)
    store.put(b"k", b"v", 9_000)
    store.close()
    store = build_store(spec, tmp_path / "w", None)
    try:
        assert store.observed_stream_time == 100
        assert store.fetch(b"k", 9_000) is None
    finally:
        store.close()


def test_discard_rolls_back_writes_and_stream_time(tmp_path, staging_segments):
    spec = window_spec(staging_segments)
    store = build_store(spec, tmp_path / "w", None)
    try:
        store.put(b"k", b"old", 100)
        store.commit(META)
        store.put(b"k", b"new", 100)
        store.put(b"k", b"later", 5_000)
        store.discard()
        assert store.observed_stream_time == 100
        assert store.fetch(b"k", 100) == b"old"
        assert store.fetch(b"k", 5_000) is None
        assert store.put(b"k", b"ok", 101) is True  # 101 is not expired against time 100
    finally:
        store.close()


def test_restore_batch_then_finish_restore_drops_windows_past_retention(build, persistent):
    store = build(retention_ms=200_000)
    records = [
        (changelog_window_key(b"k", 0), b"\x00" * 7 + b"\x01"),
        (changelog_window_key(b"k", 120_000), b"\x00" * 7 + b"\x02"),
        (changelog_window_key(b"j", 250_000), b"\x00" * 7 + b"\x03"),
        (changelog_window_key(b"k", 250_000), b"\x00" * 7 + b"\x04"),
        (changelog_window_key(b"k", 400_000), b"\x00" * 7 + b"\x05"),
        (changelog_window_key(b"k", 250_000), None),  # tombstone
    ]
    store.restore_batch(records[:3], None)
    store.restore_batch(records[3:], META)
    assert store.observed_stream_time == 400_000
    store.finish_restore()
    assert sorted(store.all()) == [("j", 250_000, 3), ("k", 400_000, 5)]
    assert store.fetch("k", 0) is None
    assert store.fetch("k", 120_000) is None
    # Segments 0 and 1 (starts below 200_000) are physically gone.
    assert raw_window_starts(store) == [250_000, 400_000]
    assert store.read_metadata() == META


def test_restored_persistent_store_survives_reopen(tmp_path, persistent_segments):
    spec = window_spec(persistent_segments)
    store = build_store(spec, tmp_path / "w", None)
    store.restore_batch([(changelog_window_key(b"k", 10), b"a")], None)
    store.restore_batch([(changelog_window_key(b"k", 3_000), b"b")], META)
    store.finish_restore()
    store.close()
    store = build_store(spec, tmp_path / "w", None)
    try:
        assert store.observed_stream_time == 3_000
        assert list(store.all()) == [(b"k", 3_000, b"b")]
        assert store.read_metadata() == META
    finally:
        store.close()


def test_restore_of_a_corrupt_changelog_key_raises(build):
    store = build()
    with pytest.raises(ChangelogCorruptError, match="too short"):
        store.restore_batch([(b"short", b"v")], None)


def test_committed_value_reads_by_changelog_key(build):
    store = build()
    store.put("k", 7, 200)
    assert store.committed_value(changelog_window_key(b"k", 200)) == b"\x00" * 7 + b"\x07"
    assert store.committed_value(changelog_window_key(b"k", 300)) is None


def test_wipe_resets_windows_and_stream_time(build):
    store = build()
    store.put("k", 1, 5_000)
    store.commit(META)
    store.wipe()
    assert store.observed_stream_time == -1
    assert list(store.all()) == []
    assert store.read_metadata() == StoreMetadata()
    assert store.put("k", 2, 0) is True


def test_changelog_window_key_roundtrip():
    key = changelog_window_key(b"user-1", 1_700_000_000_000)
    assert key == b"user-1" + (1_700_000_000_000).to_bytes(8, "big")
    assert split_changelog_window_key(key) == (b"user-1", 1_700_000_000_000)
    assert split_changelog_window_key(changelog_window_key(b"", 0)) == (b"", 0)


@pytest.mark.parametrize("data", [b"", b"1234567", None])
def test_split_changelog_window_key_rejects_short_keys(data):
    with pytest.raises(ChangelogCorruptError):
        split_changelog_window_key(data)


@pytest.mark.parametrize(
    ("size", "grace", "retention"), [(100, 0, 99), (100, 50, 149), (60_000, 5_000, 1_000)]
)
def test_builder_rejects_retention_below_size_plus_grace(size, grace, retention):
    with pytest.raises(InvalidStoreConfigError) as info:
        Stores.window("w", size_ms=size, retention_ms=retention, grace_ms=grace)
    message = str(info.value)
    for number in (retention, size, grace, size + grace):
        assert f"{number} ms" in message
    assert "'w'" in message


def test_builder_accepts_retention_equal_to_size_plus_grace():
    spec = Stores.window("w", size_ms=100, retention_ms=150, grace_ms=50)
    assert spec.retention_ms == 150


def test_with_retention_revalidates():
    spec = Stores.window("w", size_ms=100, retention_ms=1_000, grace_ms=10)
    assert spec.with_retention(110).retention_ms == 110
    with pytest.raises(InvalidStoreConfigError, match="109 ms"):
        spec.with_retention(109)


@pytest.mark.parametrize("persistent_windows", [True, False])
def test_caching_is_rejected_on_window_stores(persistent_windows):
    spec = Stores.window("w", size_ms=10, retention_ms=100, persistent=persistent_windows)
    with pytest.raises(InvalidStoreConfigError, match="caching is not supported"):
        spec.with_caching_enabled()
    assert spec.with_caching_disabled() == spec


@pytest.mark.timeout(1)
def test_open_ended_fetch_range_returns(tmp_path):
    spec = Stores.window("w", size_ms=SIZE, retention_ms=RETENTION, persistent=False)
    store = build_store(spec, tmp_path / "w", None)
    store.put(b"k", b"v", 100)
    assert list(store.fetch_range(b"k", 0, 2**63 - 1)) == [(100, b"v")]


@pytest.mark.parametrize(("size", "grace", "retention"), [(100, -50, 50), (0, 0, 0), (-10, 0, -10)])
def test_builder_rejects_non_positive_size_and_negative_grace(size, grace, retention):
    with pytest.raises(InvalidStoreConfigError):
        Stores.window("w", size_ms=size, retention_ms=retention, grace_ms=grace)


def test_a_marker_alone_restores_into_a_store_that_saw_no_window(build):
    # A task's first open under a new epoch re-commits every store with a marker of its
    # own (changelog.fencing), also a window store that has seen no record yet.
    store = build()
    store.restore_batch([], StoreMetadata(changelog_offset=3, batch_id=-1, epoch=7))
    assert store.read_metadata().epoch == 7
    assert list(store.all()) == []
