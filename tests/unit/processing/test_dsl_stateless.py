"""Stateless DSL operations, in both execution modes."""

from __future__ import annotations

from statekeeper.processing.dsl import StreamsBuilder

from .harness import as_json, records


def test_map_filter_flat_map_chain(harness, vectorize):
    b = StreamsBuilder()
    (
        b.stream("in", key_serde="str", value_serde="json")
        .filter(lambda k, v: v["n"] % 2 == 0)
        .map_values(lambda v: v["n"] * 10)
        .flat_map(lambda k, v: [(k, v), (k + "!", v + 1)])
        .filter_not(lambda k, v: k == "b!")
        .to("out", key_serde="str", value_serde="json")
    )
    h = harness(b.build(), vectorize=vectorize)
    batch = records("in", [("a", {"n": 2}, 1), ("b", {"n": 3}, 2), ("b", {"n": 4}, 3)])
    result = h.run(batch)
    assert h.emitter.kv("out", as_json) == [("a", 20), ("a!", 21), ("b", 40)]
    assert result.records_processed == 3
    assert result.records_output == 3
    assert result.vectorized is vectorize
    # Output timestamps and sk.source are the input record's.
    sent = h.emitter.to("out")
    assert [s.timestamp_ms for s in sent] == [1, 1, 3]
    assert [s.header["sk.source"] for s in sent] == [b"in:0:0", b"in:0:0", b"in:0:2"]


def test_select_key_flat_map_values_peek(harness, vectorize):
    seen = []
    b = StreamsBuilder()
    (
        b.stream("in", key_serde="bytes", value_serde="str")
        .flat_map_values(str.split)
        .select_key(lambda _k, word: word.upper())
        .peek(lambda k, v: seen.append((k, v)))
        .map(lambda k, v: (v, len(k)))
        .to("out", key_serde="str", value_serde="int")
    )
    h = harness(b.build(), vectorize=vectorize)
    h.run(records("in", [(None, "x yy", 5), (b"k", "zzz", 6)]))
    assert seen == [("X", "x"), ("YY", "yy"), ("ZZZ", "zzz")]
    out = [(s.key, int.from_bytes(s.value, "big")) for s in h.emitter.to("out")]
    assert out == [(b"x", 1), (b"yy", 2), (b"zzz", 3)]


def test_user_headers_propagate_and_sk_headers_are_replaced(harness, vectorize):
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="str").to("out", value_serde="str")
    h = harness(b.build(), vectorize=vectorize)
    rec = records("in", [("k", "v", 1)])[0]
    rec = type(rec)(rec.topic, 0, 0, 1, rec.key, rec.value, (("trace", b"t1"), ("sk.seq", b"99")))
    h.run([rec])
    (sent,) = h.emitter.to("out")
    assert [k for k, _ in sent.headers] == [
        "sk.app", "sk.task", "sk.batch", "sk.seq", "sk.source", "trace",
    ]  # fmt: skip
    assert sent.header["sk.seq"] == b"0"
    assert sent.header["sk.app"] == b"app" and sent.header["sk.task"] == b"0_0"
    assert sent.partition is None


def test_records_below_processed_offsets_are_skipped(harness, vectorize):
    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="str").to("out", value_serde="str")
    h = harness(b.build(), vectorize=vectorize)
    batch = records("in", [("a", "1", 1), ("b", "2", 2), ("c", "3", 3)])
    h.state.processed_offsets = {"in:0": 2}
    result = h.run(batch)
    assert h.emitter.kv("out") == [("c", b"3")]
    assert (result.records_read, result.records_skipped, result.records_processed) == (3, 2, 1)


def test_multiple_sources_merge_by_timestamp(harness):
    b = StreamsBuilder()
    b.stream(["a", "b"], key_serde="str", value_serde="str").to("out", value_serde="str")
    topology = b.build()
    assert topology.subtopologies[0].vector_chain is None
    assert topology.copartition_groups("app") == [["a", "b"]]
    h = harness(topology)
    batch = records("a", [("a1", "", 5), ("a2", "", 1), ("a3", "", 9)]) + records(
        "b", [("b1", "", 3), ("b2", "", 5), ("b3", "", 6)]
    )
    h.run(batch)
    # Head with the smallest timestamp first; partition order kept; ties → topic "a".
    assert [k for k, _ in h.emitter.kv("out")] == ["b1", "a1", "a2", "b2", "b3", "a3"]
