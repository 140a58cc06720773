"""Offset option parsing, offset JSON and admission control of the Kafka sources (pure)."""

from __future__ import annotations

import json
import random

import pytest

from statekeeper.errors import ConfigError
from statekeeper.spark.offset_planning import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    offsets_from_dict,
    offsets_to_dict,
    offsets_to_json,
    parse_offset_spec,
    parse_source_options,
    plan_batch_end,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "a,b"}


# --- offset specs --------------------------------------------------------------------------


def test_earliest_latest_and_json_specs():
    assert parse_offset_spec("earliest", "startingOffsets", "latest") == OffsetSpec("earliest")
    assert parse_offset_spec(" LATEST ", "startingOffsets", "earliest") == OffsetSpec("latest")
    assert parse_offset_spec(None, "startingOffsets", "latest") == OffsetSpec("latest")
    spec = parse_offset_spec('{"a": {"0": 12, "1": -2}, "b": {"3": -1}}', "startingOffsets", "x")
    assert spec == OffsetSpec("offsets", {("a", 0): 12, ("a", 1): EARLIEST, ("b", 3): LATEST})


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("{not json", "expected 'earliest', 'latest' or JSON"),
        ("[1, 2]", "JSON object of topics"),
        ('{"a": 5}', "must map partition numbers"),
        ('{"a": {"x": 5}}', "partition 'x' of topic 'a' is not a number"),
        ('{"a": {"0": -3}}', "must be an integer >= 0"),
        ('{"a": {"0": "12"}}', "must be an integer >= 0"),
        ('{"a": {"0": true}}', "must be an integer >= 0"),
    ],
)
def test_bad_offset_json_names_the_option(text: str, fragment: str):
    with pytest.raises(ConfigError, match="startingOffsets") as info:
        parse_offset_spec(text, "startingOffsets", "latest")
    assert fragment in str(info.value)


def test_resolve_uses_earliest_latest_and_defaults_missing_partitions_to_earliest():
    tps = [("a", 0), ("a", 1), ("b", 0)]
    earliest = {("a", 0): 5, ("a", 1): 0, ("b", 0): 2}
    latest = {("a", 0): 50, ("a", 1): 10, ("b", 0): 20}
    assert OffsetSpec("earliest").resolve(tps, earliest, latest) == earliest
    assert OffsetSpec("latest").resolve(tps, earliest, latest) == latest
    spec = OffsetSpec("offsets", {("a", 0): 7, ("b", 0): LATEST})
    assert spec.resolve(tps, earliest, latest) == {("a", 0): 7, ("a", 1): 0, ("b", 0): 20}


def test_offset_dicts_are_sorted_and_round_trip():
    offsets = {("b", 10): 3, ("a", 2): 1, ("b", 2): 9, ("a", 0): 4}
    as_dict = offsets_to_dict(offsets)
    assert list(as_dict) == ["a", "b"]
    assert list(as_dict["b"]) == ["2", "10"]  # numeric order, so JSON text is stable
    assert offsets_from_dict(as_dict) == offsets
    text = offsets_to_json(offsets)
    assert text == '{"a":{"0":4,"2":1},"b":{"2":9,"10":3}}'
    # Insertion order of the input never changes the text Spark compares.
    shuffled = dict(reversed(list(offsets.items())))
    assert offsets_to_json(shuffled) == text
    assert json.dumps(offsets_to_dict(shuffled)) == json.dumps(as_dict)


# --- source options ------------------------------------------------------------------------


def test_source_options_defaults_and_overrides():
    opts = parse_source_options(
        {
            **BASE,
            "subscribe": " a , b,a ",
            "maxrecordsperbatch": "1000",
            "timeoutseconds": "5",
            "kafka.security.protocol": "PLAINTEXT",
        },
        streaming=True,
    )
    assert opts.topics == ("a", "b")
    assert opts.starting == OffsetSpec("latest")
    assert opts.max_records_per_batch == 1000
    assert opts.timeout_s == 5.0
    assert opts.kafka_overrides == {"security.protocol": "PLAINTEXT"}
    alias = parse_source_options({**BASE, "maxoffsetspertrigger": "77"}, streaming=True)
    assert alias.max_records_per_batch == 77
    batch = parse_source_options(BASE, streaming=False)
    assert batch.starting == OffsetSpec("earliest") and batch.ending == OffsetSpec("latest")
    assert batch.max_records_per_batch is None


def test_option_keys_are_case_insensitive():
    opts = parse_source_options(
        {"Kafka.Bootstrap.Servers": "h:1", "SUBSCRIBE": "t", "startingOffsets": "earliest"},
        streaming=True,
    )
    assert opts.bootstrap == "h:1" and opts.topics == ("t",)
    assert opts.starting == OffsetSpec("earliest")


@pytest.mark.parametrize(
    ("options", "streaming", "fragment"),
    [
        ({"subscribe": "a"}, True, "'kafka.bootstrap.servers' is required"),
        ({"kafka.bootstrap.servers": "h:1"}, True, "'subscribe' is required"),
        ({**BASE, "subscribe": " , "}, True, "'subscribe' is required"),
        ({**BASE, "assign": '{"a":[0]}'}, True, "'assign' and 'subscribePattern'"),
        ({**BASE, "maxrecordsperbatch": "0"}, True, "'maxRecordsPerBatch' must be a positive"),
        ({**BASE, "maxrecordsperbatch": "ten"}, True, "'maxRecordsPerBatch' must be a positive"),
        ({**BASE, "timeoutseconds": "-1"}, True, "'timeoutSeconds'"),
        ({**BASE, "endingoffsets": "latest"}, True, "'endingOffsets' is for batch"),
        ({**BASE, "batchlimitfile": "/tmp/x"}, False, "'batchLimitFile' is for streaming"),
        ({**BASE, "startingoffsets": "latest"}, False, "'latest' (-1) is not allowed"),
        ({**BASE, "startingoffsets": '{"a": {"0": -1}}'}, False, "is not allowed"),
        ({**BASE, "endingoffsets": "earliest"}, False, "'earliest' (-2) is not allowed"),
        ({**BASE, "startingoffsets": '{"c": {"0": 1}}'}, False, "topic(s) c that are not in"),
        ({**BASE, "startingoffsets": "{oops"}, True, "'startingOffsets'"),
    ],
)
def test_bad_source_options_name_the_option(options: dict, streaming: bool, fragment: str):
    with pytest.raises(ConfigError) as info:
        parse_source_options(options, streaming=streaming)
    assert fragment in str(info.value)


# --- admission control ---------------------------------------------------------------------


def _tps(n: int) -> list[tuple[str, int]]:
    return [("t", p) for p in range(n)]


def test_everything_when_unlimited_or_under_the_limit():
    start = {("t", 0): 10, ("t", 1): 0}
    end = {("t", 0): 15, ("t", 1): 3}
    assert plan_batch_end(start, end, None) == end
    assert plan_batch_end(start, end, 8) == end
    assert plan_batch_end(start, end, 100) == end


def test_fair_share_with_leftover_redistributed():
    start = dict.fromkeys(_tps(3), 0)
    end = {("t", 0): 2, ("t", 1): 1000, ("t", 2): 1000}
    planned = plan_batch_end(start, end, 100)
    # Partition 0 needs only 2 of its 33: the other two share the remaining 98.
    assert planned == {("t", 0): 2, ("t", 1): 49, ("t", 2): 49}


def test_remainder_goes_to_largest_backlog():
    start = dict.fromkeys(_tps(3), 0)
    end = {("t", 0): 100, ("t", 1): 300, ("t", 2): 200}
    planned = plan_batch_end(start, end, 10)
    assert sum(planned.values()) == 10
    assert planned == {("t", 0): 3, ("t", 1): 4, ("t", 2): 3}


def test_fewer_records_than_partitions_still_progresses_over_batches():
    start = dict.fromkeys(_tps(5), 0)
    end = dict.fromkeys(_tps(5), 3)
    seen: set[tuple[str, int]] = set()
    for _ in range(3):
        planned = plan_batch_end(start, end, 2)
        assert sum(planned[tp] - start[tp] for tp in start) == 2
        seen |= {tp for tp in start if planned[tp] > start[tp]}
        start = planned
    assert seen == set(_tps(5))


def test_no_data_no_progress_and_ends_below_start_are_ignored():
    start = {("t", 0): 10, ("t", 1): 10}
    end = {("t", 0): 10, ("t", 1): 4}
    assert plan_batch_end(start, end, 5) == start
    assert plan_batch_end({("t", 0): 3}, {}, 5) == {("t", 0): 3}
    with pytest.raises(ValueError):
        plan_batch_end(start, end, -1)


def test_admission_control_properties_on_random_inputs():
    rng = random.Random(11)
    for _ in range(500):
        n = rng.randint(1, 12)
        start = {tp: rng.randint(0, 50) for tp in _tps(n)}
        end = {tp: off + rng.choice([0, 0, 1, 5, 100, 10_000]) for tp, off in start.items()}
        limit = rng.randint(1, 2000)
        planned = plan_batch_end(start, end, limit)
        backlog = {tp: end[tp] - start[tp] for tp in start}
        taken = {tp: planned[tp] - start[tp] for tp in start}
        assert all(0 <= taken[tp] <= backlog[tp] for tp in start)
        assert sum(taken.values()) == min(limit, sum(backlog.values()))
        with_data = [tp for tp in start if backlog[tp] > 0]
        if limit >= len(with_data):
            assert all(taken[tp] > 0 for tp in with_data)
        # Fair: a partition below another's share got everything it had.
        top = max(taken.values(), default=0)
        assert all(taken[tp] == backlog[tp] or taken[tp] >= top - 1 for tp in start)
