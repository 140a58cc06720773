"""Stream-table and table-table joins, source tables and co-partitioning checks."""

from __future__ import annotations

import pytest

from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.processing.errors import CopartitioningError, TopologyError

from .harness import as_json, records


def _stream_table(left: bool):
    b = StreamsBuilder()
    users = b.table("users", Materialized.as_("users"), key_serde="str", value_serde="json")
    clicks = b.stream("clicks", key_serde="str", value_serde="str")
    joined = (clicks.left_join if left else clicks.join)(
        users, lambda click, user: f"{click}/{user['name'] if user else None}"
    )
    joined.to("enriched", value_serde="str")
    return b.build()


@pytest.mark.parametrize("left", [False, True], ids=["join", "left_join"])
def test_stream_table_join_looks_up_the_table_at_processing_time(harness, left):
    topology = _stream_table(left)
    assert len(topology.subtopologies) == 1
    assert topology.copartition_groups("app") == [["clicks", "users"]]
    h = harness(topology)
    batch = records("users", [("u1", {"name": "A"}, 1), ("u2", {"name": "B"}, 4)]) + records(
        "clicks", [("u1", "c1", 2), ("u2", "c2", 3), ("u2", "c3", 5), ("u3", "c4", 6)]
    )
    h.run(batch)
    expected = [("u1", b"c1/A"), ("u2", b"c2/None"), ("u2", b"c3/B"), ("u3", b"c4/None")]
    if not left:
        expected = [e for e in expected if not e[1].endswith(b"None")]
    assert h.emitter.kv("enriched") == expected
    assert h.contents("users") == {"u1": {"name": "A"}, "u2": {"name": "B"}}


def test_table_source_tombstone_deletes(harness):
    topology = _stream_table(left=True)
    h = harness(topology)
    h.run(records("users", [("u1", {"name": "A"}, 1), ("u1", None, 2)]))
    assert h.contents("users") == {}


@pytest.mark.parametrize("left", [False, True], ids=["join", "left_join"])
def test_table_table_join(harness, left):
    b = StreamsBuilder()
    names = b.table("names", Materialized.as_("names"), key_serde="str", value_serde="str")
    ages = b.table("ages", Materialized.as_("ages"), key_serde="str", value_serde="json")
    joined = (names.left_join if left else names.join)(
        ages, lambda name, age: {"name": name, "age": age}, Materialized.as_("people")
    )
    joined.to_stream().to("people", value_serde="json")
    topology = b.build()
    assert len(topology.subtopologies) == 1
    h = harness(topology)
    batch = records("names", [("k1", "Ann", 1), ("k2", "Bob", 3), ("k1", None, 6)]) + records(
        "ages", [("k1", 30, 2), ("k3", 50, 4), ("k2", 40, 5)]
    )
    h.run(batch)
    people = h.contents("people")
    if left:
        assert people == {"k2": {"name": "Bob", "age": 40}}
        outputs = h.emitter.kv("people", as_json)
        assert ("k2", {"name": "Bob", "age": None}) in outputs  # before k2's age arrived
    else:
        assert people == {"k2": {"name": "Bob", "age": 40}}
    assert dict(h.emitter.kv("people", as_json))["k1"] is None  # name deleted → tombstone


def test_join_with_a_derived_table_materialises_it(harness):
    b = StreamsBuilder()
    counts = b.stream("events", key_serde="str", value_serde="str").group_by_key().count()
    big = counts.filter(lambda k, n: n >= 2)
    assert big.store_name is None
    b.stream("queries", key_serde="str", value_serde="str").join(big, lambda q, n: f"{q}:{n}").to(
        "answers", value_serde="str"
    )
    topology = b.build()
    assert big.store_name is not None
    h = harness(topology)
    batch = records("events", [("a", "x", 1), ("a", "x", 2), ("b", "x", 3)]) + records(
        "queries", [("a", "q1", 4), ("b", "q2", 5)]
    )
    h.run(batch)
    assert h.emitter.kv("answers") == [("a", b"q1:2")]


def test_copartitioning_is_checked_with_a_clear_message():
    topology = _stream_table(left=False)
    topology.check_copartitioning("app", {"clicks": 4, "users": 4})
    with pytest.raises(CopartitioningError, match="clicks=4, users=2"):
        topology.check_copartitioning("app", {"clicks": 4, "users": 2})


def test_join_after_a_key_change_needs_a_repartition():
    b = StreamsBuilder()
    table = b.table("t")
    stream = b.stream("s").select_key(lambda k, v: v)
    with pytest.raises(TopologyError, match="repartition"):
        stream.join(table, lambda a, c: a)
    joined = stream.repartition("rekeyed").join(table, lambda a, c: a)
    joined.to("out")
    topology = b.build()
    assert topology.internal_topics("app") == ["app-rekeyed-repartition"]
    assert topology.copartition_groups("app") == [["app-rekeyed-repartition", "t"]]
    assert topology.repartition_partitions("app", {"s": 8, "t": 4}) == {
        "app-rekeyed-repartition": 4
    }
