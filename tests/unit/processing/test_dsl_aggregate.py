"""count / reduce / aggregate (tombstones included), in both execution modes."""

from __future__ import annotations

import pytest

from statekeeper.processing.dsl import Materialized, StreamsBuilder

from .harness import as_json, records


def _counts_topology(**materialized_kw):
    b = StreamsBuilder()
    counts = (
        b.stream("in", key_serde="str", value_serde="str")
        .group_by_key()
        .count(Materialized.as_("counts"))
    )
    counts.to_stream().to("out", value_serde="int")
    return b.build()


def test_count(harness, vectorize):
    h = harness(_counts_topology(), vectorize=vectorize)
    h.run(records("in", [("a", "x", 1), ("b", "x", 2), ("a", "x", 3)]))
    h.run(records("in", [("a", "x", 4)], start_offset=3))
    assert h.contents("counts") == {"a": 3, "b": 1}
    outputs = [(k, int.from_bytes(v, "big")) for k, v in h.emitter.kv("out")]
    if vectorize:  # one change per distinct key per batch
        assert outputs == [("a", 2), ("b", 1), ("a", 3)]
    else:  # every update
        assert outputs == [("a", 1), ("b", 1), ("a", 2), ("a", 3)]
    # The latest output per key is the final count either way.
    assert dict(outputs) == {"a": 3, "b": 1}


def test_vectorised_output_source_is_the_keys_last_record(harness):
    h = harness(_counts_topology())
    h.run(records("in", [("a", "x", 10), ("b", "x", 20), ("a", "x", 30)]))
    sent = h.emitter.to("out")
    assert [(s.key, s.header["sk.source"], s.timestamp_ms) for s in sent] == [
        (b"a", b"in:0:2", 30),
        (b"b", b"in:0:1", 20),
    ]


def test_null_values_are_dropped_null_keys_go_to_dlq(harness, vectorize):
    h = harness(_counts_topology(), vectorize=vectorize)
    result = h.run(records("in", [("a", None, 1), (None, "x", 2), ("a", "x", 3)]))
    assert h.contents("counts") == {"a": 1}
    assert result.records_dropped == 1
    assert result.records_dlq == 1
    (dlq,) = h.emitter.to("app-dlq")
    assert dlq.header["sk.error.type"] == b"null-key"
    assert dlq.header["sk.source"] == b"in:0:1"


def test_reduce(harness, vectorize):
    b = StreamsBuilder()
    (
        b.stream("in", key_serde="str", value_serde="int")
        .group_by_key()
        .reduce(lambda agg, v: max(agg, v), Materialized.as_("max"))
    )
    h = harness(b.build(), vectorize=vectorize)
    enc = lambda n: n.to_bytes(8, "big", signed=True)  # noqa: E731
    h.run(records("in", [("a", 3, 1), ("a", 7, 2), ("b", 1, 3), ("a", 5, 4)], encode_value=enc))
    assert h.contents("max") == {"a": 7, "b": 1}


def test_aggregate_with_tombstones(harness, vectorize):
    """An aggregate of None deletes the key; the next record starts from the initializer."""

    def add(key, value, agg):
        if value == "reset":
            return None
        return {"n": agg["n"] + 1, "items": agg["items"] + [value]}

    b = StreamsBuilder()
    table = (
        b.stream("in", key_serde="str", value_serde="str")
        .group_by_key()
        .aggregate(lambda: {"n": 0, "items": []}, add, Materialized.as_("agg"))
    )
    table.to_stream().to("out", value_serde="json")
    h = harness(b.build(), vectorize=vectorize)
    h.run(
        records(
            "in",
            [("a", "x", 1), ("a", "reset", 2), ("a", "y", 3), ("b", "z", 4), ("b", "reset", 5)],
        )
    )
    assert h.contents("agg") == {"a": {"n": 1, "items": ["y"]}}
    latest = dict(h.emitter.kv("out", as_json))
    assert latest == {"a": {"n": 1, "items": ["y"]}, "b": None}  # b: a tombstone
    assert h.emitter.to("out")[-1].value is None


def test_aggregator_errors_go_to_dlq_and_skip_only_that_record(harness, vectorize):
    def add(key, value, agg):
        if value == "boom":
            raise RuntimeError("bad value")
        return agg + len(value)

    b = StreamsBuilder()
    (
        b.stream("in", key_serde="str", value_serde="str")
        .group_by_key()
        .aggregate(lambda: 0, add, Materialized.as_("len").with_value_serde("int"))
    )
    h = harness(b.build(), vectorize=vectorize)
    result = h.run(records("in", [("a", "xx", 1), ("a", "boom", 2), ("a", "yyy", 3)]))
    assert h.contents("len") == {"a": 5}
    assert result.records_dlq == 1 and result.records_processed == 2
    (dlq,) = h.emitter.to("app-dlq")
    assert dlq.value == b"boom"
    assert dlq.header["sk.error.type"] == b"processing"
    assert dlq.header["sk.error.message"] == b"RuntimeError: bad value"


@pytest.mark.parametrize(
    "materialized, kind",
    [
        (Materialized.as_("c").with_store_type("in_memory"), "memory"),
        (Materialized.as_("c").with_store_type("lru", capacity=2), "lru"),
        (Materialized.as_("c").with_caching_enabled(1024), "rocksdb"),
        (Materialized.as_("c").with_logging_disabled(), "rocksdb"),
    ],
)
def test_materialized_store_options(harness, vectorize, materialized, kind):
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="str").group_by_key().count(materialized)
    topology = b.build()
    (spec,) = [s for s in topology.store_specs(0) if s.name == "c"]
    assert spec.kind == kind
    assert spec.key_serde == "str" and spec.value_serde == "int"
    h = harness(topology, vectorize=vectorize)
    h.run(records("in", [("a", "x", 1), ("b", "x", 2), ("c", "x", 3), ("a", "x", 4)]))
    contents = h.contents("c")
    if kind == "lru":  # a was evicted by c, so it starts again from 1
        assert contents == {"c": 1, "a": 1}
        assert h.task.subtopology.vector_chain is None
    else:
        assert contents == {"a": 2, "b": 1, "c": 1}
    assert spec.logging_enabled == materialized.logging_enabled


def test_unnamed_stores_get_generated_lower_case_names():
    b = StreamsBuilder()
    b.stream("in").group_by_key().count()
    topology = b.build()
    names = [s.name for s in topology.store_specs(0)]
    assert names == ["kstream-aggregate-state-store-0000000001", "sk-task-state-0"]


def test_table_map_values_and_filter(harness, vectorize):
    b = StreamsBuilder()
    counts = (
        b.stream("in", key_serde="str", value_serde="str")
        .group_by_key()
        .count(Materialized.as_("counts"))
    )
    counts.filter(lambda k, n: n >= 2).map_values(lambda n: n * 100).to_stream().to(
        "out", value_serde="json"
    )
    h = harness(b.build(), vectorize=vectorize)
    h.run(records("in", [("a", "x", 1), ("b", "x", 2), ("a", "x", 3)]))
    latest = dict(h.emitter.kv("out", as_json))
    assert latest == {"a": 200, "b": None}  # b filtered out → tombstone


def test_store_serde_failures_dead_letter_exactly_the_failing_records(harness, vectorize):
    """A result the store cannot serialize: that record goes to the DLQ and the aggregate
    stays as it was, in both modes (the batch path refolds such keys record by record)."""

    def add(key, value, agg):
        return {"not", "json"} if value == "bad" else agg + [value]

    b = StreamsBuilder()
    (
        b.stream("in", key_serde="str", value_serde="str")
        .group_by_key()
        .aggregate(list, add, Materialized.as_("agg"))
    )
    h = harness(b.build(), vectorize=vectorize)
    result = h.run(records("in", [("a", "x", 1), ("a", "bad", 2), ("a", "y", 3), ("b", "z", 4)]))
    assert h.contents("agg") == {"a": ["x", "y"], "b": ["z"]}
    assert result.records_dlq == 1
    (dlq,) = h.emitter.to("app-dlq")
    assert dlq.value == b"bad" and dlq.header["sk.error.type"] == b"processing"


def test_keys_the_store_cannot_serialize_are_dead_lettered(harness, vectorize):
    b = StreamsBuilder()
    (
        b.stream("in", key_serde="str", value_serde="str")
        .group_by_key()
        .count(Materialized.as_("c").with_key_serde("int"))
    )
    h = harness(b.build(), vectorize=vectorize)
    result = h.run(records("in", [("a", "x", 1), ("b", "x", 2)]))
    assert result.records_dlq == 2
    assert h.contents("c") == {}


def test_count_and_windowed_count_in_a_custom_engine(harness, vectorize):
    """``Materialized.as_(name, supplier)``: the DSL's tables in a user's engine (SQLite,
    docs/custom-stores.md) hold what the built-in stores hold."""
    from spark_apps.word_count_sqlite.sqlite_store import SQLiteStoreSupplier
    from statekeeper.stores.time_windows import TimeWindows

    supplier = SQLiteStoreSupplier(synchronous="OFF")
    b = StreamsBuilder()
    stream = b.stream("in", key_serde="str", value_serde="str")
    stream.group_by_key().count(Materialized.as_("counts", supplier))
    stream.group_by_key().windowed_by(TimeWindows.tumbling(10)).count(
        Materialized.as_(supplier).with_retention(1_000)
    )
    topology = b.build()
    specs = {s.name: s for sub in topology.subtopologies for s in topology.store_specs(sub.id)}
    assert specs["counts"].kind == "custom" and specs["counts"].engine == "sqlite"
    windowed = next(s for s in specs.values() if s.kind == "window")
    assert windowed.supplier is supplier and windowed.persistent
    h = harness(topology, vectorize=vectorize)
    h.run(records("in", [("a", "x", 1), ("b", "x", 2), ("a", "x", 13)]))
    assert h.contents("counts") == {"a": 2, "b": 1}
    assert h.contents(windowed.name) == {("a", 0): 1, ("b", 0): 1, ("a", 10): 1}


def test_a_supplier_with_a_store_type_is_refused():
    from spark_apps.word_count_sqlite.sqlite_store import SQLiteStoreSupplier
    from statekeeper.processing.errors import TopologyError

    b = StreamsBuilder()
    grouped = b.stream("in", key_serde="str", value_serde="str").group_by_key()
    with pytest.raises(TopologyError, match="a supplier's store has no store type"):
        grouped.count(
            Materialized.as_("c", SQLiteStoreSupplier()).with_store_type("lru", capacity=5)
        )
