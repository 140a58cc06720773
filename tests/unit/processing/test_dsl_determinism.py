"""Determinism (invariant 2, docs/invariants.md): batch boundaries and re-runs change nothing."""

from __future__ import annotations

import random

import pytest

from statekeeper.processing.dsl import Materialized, StreamsBuilder, Suppressed
from statekeeper.stores.time_windows import TimeWindows

from .harness import records


def _count_topology():
    b = StreamsBuilder()
    counts = (
        b.stream("in", key_serde="str", value_serde="str")
        .filter(lambda k, v: v != "skip")
        .group_by_key()
        .count(Materialized.as_("counts"))
    )
    counts.to_stream().to("out", value_serde="int")
    return b.build(), "counts"


def _window_topology():
    b = StreamsBuilder()
    windowed = (
        b.stream("in", key_serde="str", value_serde="str")
        .group_by_key()
        .windowed_by(TimeWindows.tumbling(1_000, grace_ms=300))
        .count(Materialized.as_("w").with_retention(10**9))
    )
    windowed.suppress(Suppressed.until_window_closes()).to_stream().map(
        lambda wk, n: (f"{wk.key}@{wk.start}", n)
    ).to("out", value_serde="int")
    return b.build(), "w"


def _input(seed: int, n: int = 400):
    rng = random.Random(seed)
    items = []
    ts = 0
    for _ in range(n):
        ts += rng.randint(-150, 200)  # out of order, sometimes late
        value = "skip" if rng.random() < 0.1 else "x"
        items.append((f"k{rng.randint(0, 9)}", value, max(ts, 0)))
    return records("in", items)


def _split(batch, seed):
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(batch)), 5))
    return [batch[a:b] for a, b in zip([0, *cuts], [*cuts, len(batch)], strict=True)]


@pytest.mark.parametrize("make", [_count_topology, _window_topology], ids=["count", "window"])
@pytest.mark.parametrize("seed", [1, 2])
def test_batch_boundaries_do_not_change_the_state(harness, make, seed):
    batch = _input(seed)
    final = []
    for i, (vectorize, parts) in enumerate(
        [(False, [batch]), (False, _split(batch, seed)), (True, _split(batch, seed + 7))]
    ):
        topology, store = make()
        h = harness(topology, name=f"run{i}", vectorize=vectorize)
        for part in parts:
            h.run(part, batch_time_ms=1_000)
        latest = {}
        for key, value in h.emitter.kv("out"):
            latest[key] = value
        final.append((h.contents(store), latest))
    assert final[0] == final[1] == final[2]


@pytest.mark.parametrize("make", [_count_topology, _window_topology], ids=["count", "window"])
def test_rerun_of_a_batch_emits_identical_records(harness, vectorize, make):
    topology, store = make()
    h = harness(topology, vectorize=vectorize)
    first, second = _input(3)[:200], _input(3)[200:]
    h.run(first, batch_id=1, batch_time_ms=1_000)
    h.emitter.clear()
    h.run(second, batch_id=2, batch_time_ms=2_000, commit=False)  # the attempt crashes
    attempt = list(h.emitter.sent)
    h.emitter.clear()
    h.restart()
    h.run(second, batch_id=2, batch_time_ms=2_000)
    assert h.emitter.sent == attempt
    assert attempt and [int(s.header["sk.seq"]) for s in attempt] == list(range(len(attempt)))
    # And a committed batch delivered again is skipped entirely.
    h.emitter.clear()
    result = h.run(second, batch_id=3, batch_time_ms=3_000)
    assert result.records_skipped == len(second) and h.emitter.sent == []
