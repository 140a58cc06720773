"""Metered layer: typed access through serdes, operation metrics, clear SerdeErrors."""

from __future__ import annotations

import pytest

from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import Stores, build_store
from statekeeper.stores.metrics import OperationStats, StoreMetrics
from statekeeper.stores.serdes import IntSerde, SerdeError
from statekeeper.stores.typed import KeyValueStore, WindowStore

from .custom_suppliers import SQLiteStoreSupplier

SPECS = {
    "memory": Stores.in_memory("counts"),
    "rocksdb": Stores.persistent("counts"),
    "sqlite": Stores.custom("counts", SQLiteStoreSupplier()),
}


@pytest.fixture(params=list(SPECS))
def counts(request, tmp_path):
    spec = SPECS[request.param]
    store = build_store(spec.with_serdes("str", "int"), tmp_path / "counts", None)
    yield store
    store.close()


def ops(store) -> dict:
    return store.metrics.as_dict()["operations"]


def test_typed_roundtrip(counts):
    assert isinstance(counts, KeyValueStore)
    counts.put("a", 1)
    counts.put_all([("b", 2), ("c", 3)])
    assert counts.get("a") == 1
    assert counts.get("missing") is None
    assert counts.get_many(["c", "missing", "a"]) == [3, None, 1]
    assert counts.put_if_absent("a", 10) == 1
    assert counts.put_if_absent("d", 4) is None
    assert counts.delete("b") == 2
    counts.put("c", None)
    assert list(counts.all()) == [("a", 1), ("d", 4)]
    assert list(counts.range("a", "c", reverse=True)) == [("a", 1)]
    assert list(counts.prefix_scan("d")) == [("d", 4)]
    assert counts.approximate_num_entries() >= 2


def test_int_keys_scan_in_numeric_order(tmp_path):
    store = build_store(Stores.in_memory("ints").with_serdes("int", "str"), tmp_path, None)
    for k in (300, 2, 70_000, 0):
        store.put(k, str(k))
    assert [k for k, _ in store.all()] == [0, 2, 300, 70_000]
    assert list(store.range(1, 300)) == [(2, "2"), (300, "300")]


def test_metrics_count_put_get_and_range(counts):
    for i in range(3):
        counts.put(f"k{i}", i)
    counts.put_all([("x", 1), ("y", 2)])
    counts.get("k0")
    counts.get("missing")
    counts.get_many(["k1", "k2", "k3", "k4"])
    assert list(counts.range("k0", "k2")) == [("k0", 0), ("k1", 1), ("k2", 2)]
    list(counts.all())
    counts.delete("x")
    counts.commit(StoreMetadata())

    snapshot = counts.metrics.as_dict()
    assert snapshot["store"] == "counts"
    operations = snapshot["operations"]
    assert list(operations) == sorted(operations)
    assert operations["put"]["count"] == 5  # 3 puts + a put_all of 2
    assert operations["get"]["count"] == 6  # 2 gets + a get_many of 4
    assert operations["range"]["count"] == 1
    assert operations["range_entries"]["count"] == 3
    assert operations["all"]["count"] == 1
    assert operations["all_entries"]["count"] == 5
    assert operations["delete"]["count"] == 1
    assert operations["commit"]["count"] == 1
    for stats in operations.values():
        assert set(stats) == {"count", "avg_latency_us", "max_latency_us"}
        assert stats["avg_latency_us"] >= 0 and stats["max_latency_us"] >= 0


def test_scan_metrics_are_recorded_when_the_scan_is_consumed(counts):
    counts.put("a", 1)
    it = counts.range(None, None)
    assert "range" not in ops(counts)
    list(it)
    assert ops(counts)["range"]["count"] == 1


def test_operation_stats_math():
    stats = OperationStats()
    assert stats.as_dict() == {"count": 0, "avg_latency_us": 0.0, "max_latency_us": 0.0}
    stats.record(2_000, 1)
    stats.record(6_000, 3)
    assert stats.as_dict() == {"count": 4, "avg_latency_us": 2.0, "max_latency_us": 6.0}
    metrics = StoreMetrics("s")
    assert metrics.op("get") is metrics.op("get")


def test_corrupt_stored_value_names_store_and_key(counts):
    counts.wrapped.put(b"bad", b"\x01\x02")  # not an 8-byte int
    with pytest.raises(SerdeError, match=r"store 'counts', key 'bad': stored value") as info:
        counts.get("bad")
    assert "IntSerde expects 8 bytes, got 2" in str(info.value)
    assert isinstance(info.value.__cause__, SerdeError)
    with pytest.raises(SerdeError, match=r"store 'counts', key 'bad'"):
        list(counts.all())
    with pytest.raises(SerdeError, match=r"store 'counts', key 'bad'"):
        counts.get_many(["bad"])
    with pytest.raises(SerdeError, match=r"store 'counts', key 'bad'"):
        counts.delete("bad")


def test_entry_columns_read_in_key_order_in_chunks_and_name_a_corrupt_entry(counts):
    from statekeeper.stores.typed import entry_columns, typed_entries

    counts.put_all([(f"k{i:02d}", i) for i in range(25)])
    counts.flush()
    chunks = list(entry_columns(counts, size=10))
    assert [len(keys) for keys, _ in chunks] == [10, 10, 5]
    assert [k for keys, _ in chunks for k in keys] == [f"k{i:02d}" for i in range(25)]
    assert [v for _, values in chunks for v in values] == list(range(25))
    assert list(typed_entries(counts)) == list(counts.all())
    counts.wrapped.put(b"k07", b"\x01")
    with pytest.raises(SerdeError, match=r"store 'counts', key 'k07': stored value"):
        list(entry_columns(counts))


def test_corrupt_stored_key_names_the_store(counts):
    counts.wrapped.put(b"\xff\xfe", IntSerde().serialize(1))
    with pytest.raises(SerdeError, match=r"store 'counts': stored key: not valid UTF-8"):
        list(counts.all())


def test_values_of_the_wrong_type_are_rejected_before_writing(counts):
    with pytest.raises(SerdeError, match="IntSerde expects int"):
        counts.put("a", "not an int")
    with pytest.raises(SerdeError, match="StringSerde expects str"):
        counts.put(1, 1)
    assert list(counts.all()) == []


def test_window_store_metrics_and_corrupt_values(tmp_path):
    spec = Stores.window("w", size_ms=10, retention_ms=1_000, persistent=False)
    store = build_store(spec.with_serdes("str", "json"), tmp_path / "w", None)
    assert isinstance(store, WindowStore)
    store.put("k", {"n": 1}, 0)
    store.put("k", [2], 10)
    assert store.fetch("k", 0) == {"n": 1}
    assert list(store.fetch_range("k", 0, 10)) == [(0, {"n": 1}), (10, [2])]
    assert list(store.all()) == [("k", 0, {"n": 1}), ("k", 10, [2])]
    operations = ops(store)
    assert operations["put"]["count"] == 2
    assert operations["fetch"]["count"] == 1
    assert operations["fetch_range"]["count"] == 1

    store.wrapped.put(b"k", b"{broken", 20)
    with pytest.raises(SerdeError, match=r"store 'w', key 'k': stored value: not valid JSON"):
        store.fetch("k", 20)
