"""Windowed aggregations (tumbling, hopping, grace, late drops) and suppress."""

from __future__ import annotations

import pytest

from statekeeper.processing.dsl import Materialized, StreamsBuilder, Suppressed
from statekeeper.processing.errors import TopologyError
from statekeeper.processing.windowed_key import Windowed, WindowedSerde
from statekeeper.stores.time_windows import TimeWindows

from .harness import records

SIZE, GRACE = 10_000, 2_000
# (key, timestamp) → see test_tumbling_with_suppress for the expected effect of each.
EVENTS = [
    ("a", 1_000),
    ("b", 3_000),
    ("a", 11_000),
    ("a", 9_000),  # window [0, 10s) still open: 10s + 2s > stream time 11s
    ("b", 12_500),  # stream time 12.5s closes [0, 10s)
    ("a", 9_500),  # late: 10s + 2s <= 12.5s
    ("c", 22_000),  # closes [10s, 20s)
]


def _suppressed_topology(suppress_name: str | None = None):
    b = StreamsBuilder()
    counts = (
        b.stream("in", key_serde="str", value_serde="str")
        .group_by_key()
        .windowed_by(TimeWindows.tumbling(SIZE, grace_ms=GRACE))
        .count(Materialized.as_("windows").with_retention(100_000))
    )
    counts.to_stream().to("updates", key_serde=WindowedSerde("str", SIZE), value_serde="int")
    final = counts.suppress(Suppressed.until_window_closes(suppress_name))
    final.to_stream().map(lambda wk, n: (f"{wk.key}@{wk.start}", n)).to("final", value_serde="int")
    return b.build()


def _int(b: bytes) -> int:
    return int.from_bytes(b, "big")


@pytest.mark.parametrize("split", [None, 2, 4, 5], ids=lambda s: f"restart-after-{s}")
def test_tumbling_with_suppress(harness, split):
    topology = _suppressed_topology("final")
    h = harness(topology)
    batch = records("in", [(k, "x", ts) for k, ts in EVENTS])
    if split is None:
        results = [h.run(batch)]
    else:
        results = [h.run(batch[:split])]
        h.restart()  # stream time, windows and the suppression buffer come back from disk
        results.append(h.run(batch[split:]))
    assert h.contents("windows") == {
        ("a", 0): 2,
        ("b", 0): 1,
        ("a", 10_000): 1,
        ("b", 10_000): 1,
        ("c", 20_000): 1,
    }
    assert sum(r.records_late_dropped for r in results) == 1
    assert results[-1].stream_time == 22_000
    final = [(k, _int(v)) for k, v in h.emitter.kv("final")]
    assert final == [("a@0", 2), ("b@0", 1), ("a@10000", 1), ("b@10000", 1)]
    # Every update of the unsuppressed table is emitted, windowed keys serialized.
    serde = WindowedSerde("str", SIZE)
    updates = [(serde.deserialize(s.key), _int(s.value)) for s in h.emitter.to("updates")]
    assert updates[0] == (Windowed("a", 0, 10_000), 1)
    assert len(updates) == len(EVENTS) - 1  # all but the late record
    # The buffer keeps only the open window of c.
    assert len(h.task.stores["final-store"]) == 1


def test_hopping_windows_partially_late(harness, vectorize):
    b = StreamsBuilder()
    (
        b.stream("in", key_serde="str", value_serde="str")
        .group_by_key()
        .windowed_by(TimeWindows.hopping(10_000, 5_000))
        .count(Materialized.as_("hop"))
    )
    h = harness(b.build(), vectorize=vectorize)
    result = h.run(records("in", [("a", "x", 7_000), ("a", "x", 12_000), ("a", "x", 9_000)]))
    assert h.contents("hop") == {("a", 5_000): 3, ("a", 10_000): 1}  # [0, 10s) past retention
    assert result.records_late_dropped == 1


def test_window_retention_defaults_to_size_plus_grace():
    b = StreamsBuilder()
    b.stream("in").group_by_key().windowed_by(TimeWindows.tumbling(60_000, 5_000)).count("w")
    (spec,) = [s for s in b.build().store_specs(0) if s.name == "w"]
    assert (spec.kind, spec.window_size_ms, spec.grace_ms, spec.retention_ms) == (
        "window", 60_000, 5_000, 65_000,
    )  # fmt: skip


def test_windowed_aggregate_tombstone_deletes_the_window(harness):
    b = StreamsBuilder()
    table = (
        b.stream("in", key_serde="str", value_serde="str")
        .group_by_key()
        .windowed_by(TimeWindows.tumbling(SIZE))
        .aggregate(
            lambda: "",
            lambda k, v, agg: None if v == "del" else agg + v,
            Materialized.as_("w").with_value_serde("str").with_retention(100_000),
        )
    )
    table.to_stream().map(lambda wk, v: (wk.key, v)).to("out", value_serde="str")
    h = harness(b.build())
    h.run(records("in", [("a", "x", 1), ("a", "y", 2), ("a", "del", 3), ("b", "z", 4)]))
    assert h.contents("w") == {("b", 0): "z"}
    assert h.emitter.kv("out") == [("a", b"x"), ("a", b"xy"), ("a", None), ("b", b"z")]


def test_windowed_keys_need_a_key_serde_to_be_written():
    b = StreamsBuilder()
    table = b.stream("in").group_by_key().windowed_by(TimeWindows.tumbling(1_000)).count()
    with pytest.raises(TopologyError, match="Windowed"):
        table.to_stream().to("out")
    with pytest.raises(TopologyError, match="Windowed"):
        table.to_stream().group_by_key()
    with pytest.raises(TopologyError, match="windowed table"):
        b.stream("other").group_by_key().count().suppress(Suppressed.until_window_closes())
