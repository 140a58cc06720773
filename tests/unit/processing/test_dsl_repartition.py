"""group_by → repartition topic → count, with exact counts despite re-emitted prefixes."""

from __future__ import annotations

import pytest

from statekeeper.processing.dsl import Grouped, Materialized, StreamsBuilder

from .harness import records

REPARTITION = "app-words-repartition"


def _topology():
    b = StreamsBuilder()
    (
        b.stream("lines", key_serde="bytes", value_serde="str")
        .flat_map_values(str.split)
        .group_by(lambda _k, w: w, Grouped.as_("words").with_value_serde("str"))
        .count(Materialized.as_("counts"))
    )
    return b.build()


def test_group_by_splits_into_two_subtopologies():
    topology = _topology()
    assert [s.id for s in topology.subtopologies] == [0, 1]
    assert topology.internal_topics("app") == [REPARTITION]
    assert topology.subtopology_topics("app", 1) == [REPARTITION]
    assert topology.subtopology_of("app", "lines") == 0
    assert topology.subtopology_of("app", REPARTITION) == 1
    assert topology.store_specs(0) == []  # stateless: no stores, no changelogs
    assert [s.name for s in topology.store_specs(1)] == ["counts", "sk-task-state-1"]
    assert topology.repartition_partitions("app", {"lines": 4}) == {REPARTITION: 4}


def _consumed(sent, start_offset=0):
    """The repartition records as the downstream task (partition 0) reads them."""
    return [s.as_record(0, start_offset + i) for i, s in enumerate(sent)]


LINES = [(None, "a b a", 1), (None, "c a", 2), (None, "b", 3)]
EXPECTED = {"a": 3, "b": 2, "c": 1}


@pytest.mark.parametrize("prefix", [0, 1, 3, 6])
def test_reemitted_prefix_is_applied_once(harness, vectorize, prefix):
    topology = _topology()
    up = harness(topology, name="up", subtopology=0, vectorize=vectorize)
    down = harness(topology, name="down", subtopology=1, vectorize=vectorize)
    batch = records("lines", LINES)
    # Attempt 1 crashes after producing `prefix` records; attempt 2 redoes the batch.
    up.run(batch, batch_id=5, commit=False)
    crashed = list(up.emitter.sent[:prefix])
    up.emitter.clear()
    up.restart()
    up.run(batch, batch_id=5)
    retried = up.emitter.to(REPARTITION)
    assert [s.dedupe_id for s in crashed] == [s.dedupe_id for s in retried[:prefix]]

    consumed = _consumed(crashed + retried)
    result = down.run(consumed)
    assert down.contents("counts") == EXPECTED
    assert result.records_deduplicated == prefix
    assert result.records_skipped == prefix


def test_duplicates_across_downstream_batches_and_upstream_tasks(harness, vectorize):
    topology = _topology()
    up0 = harness(topology, name="up0", subtopology=0, partition=0, vectorize=vectorize)
    up1 = harness(topology, name="up1", subtopology=0, partition=1, vectorize=vectorize)
    down = harness(topology, name="down", subtopology=1, vectorize=vectorize)
    up0.run(records("lines", LINES, partition=0), batch_id=1)
    up1.run(records("lines", [(None, "a a", 1)], partition=1), batch_id=1)
    from_0, from_1 = up0.emitter.to(REPARTITION), up1.emitter.to(REPARTITION)
    # Same seq numbers from two upstream tasks must not be confused.
    assert from_0[0].header["sk.seq"] == from_1[0].header["sk.seq"] == b"0"
    # Downstream batch 1 sees part of task 0_0's output and all of 0_1's.
    first = _consumed(from_0[:2] + from_1)
    down.run(first)
    # Batch 2: task 0_0 crashed and re-emitted everything.
    second = _consumed(from_0, start_offset=len(first))
    result = down.run(second)
    assert result.records_deduplicated == 2
    assert down.contents("counts") == {"a": 5, "b": 2, "c": 1}
    # Positions survive a restart of the downstream task (kept in the task-state store).
    down.restart()
    down.run(_consumed(from_0 + from_1, start_offset=len(first) + len(second)))
    assert down.contents("counts") == {"a": 5, "b": 2, "c": 1}


def test_keyless_records_are_dead_lettered_before_the_repartition(harness, vectorize):
    b = StreamsBuilder()
    (
        b.stream("in", key_serde="str", value_serde="str")
        .group_by(lambda k, v: None if v == "nokey" else v)
        .count()
    )
    up = harness(b.build(), vectorize=vectorize)
    result = up.run(records("in", [("k", "x", 1), ("k", "nokey", 2)]))
    assert result.records_dlq == 1
    (dlq,) = up.emitter.to("app-dlq")
    assert dlq.header["sk.error.type"] == b"null-key"
    assert [s.key for s in up.emitter.sent if s.topic.endswith("-repartition")] == [b"x"]
