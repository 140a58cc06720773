"""--from and --until: parsed before any broker, resolved against partition counts and log
ends (pure)."""

from __future__ import annotations

import pytest

from statekeeper.backfill.bounds import (
    NOW,
    FromSpec,
    UntilSpec,
    parse_from,
    parse_until,
    records_left,
    resolve_until,
)
from statekeeper.errors import ConfigError

SOURCES = ["lines", "clicks"]
PARTITIONS = {"lines": 2, "clicks": 1}
ENDS = {("lines", 0): 100, ("lines", 1): 80, ("clicks", 0): 7}


def test_from_is_earliest_by_default_or_a_timestamp() -> None:
    assert parse_from(None) == FromSpec() == parse_from(" Earliest ")
    assert parse_from("1700000000000") == FromSpec(1_700_000_000_000)
    assert parse_from(None).label == "earliest" and FromSpec(5).label == "5"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("yesterday", "--from: expected 'earliest' or a timestamp in epoch milliseconds"),
        ("-5", "--from: a timestamp must be >= 0 ms, got -5"),
        ("1.5", "got '1.5'"),
    ],
)
def test_bad_from_is_one_line(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match="--from") as info:
        parse_from(text)
    assert says in str(info.value)


def test_until_now_reads_every_partition_to_its_log_end() -> None:
    assert parse_until(None, SOURCES) == UntilSpec() == parse_until("NOW", SOURCES)
    assert resolve_until(UntilSpec(), PARTITIONS, ENDS) == ENDS


def test_until_offsets_name_partitions_and_unnamed_topics_read_to_now() -> None:
    spec = parse_until('{"lines": {"0": 40, "1": -1}}', SOURCES)
    assert spec.offsets == {("lines", 0): 40, ("lines", 1): NOW}
    assert resolve_until(spec, PARTITIONS, ENDS) == {
        ("lines", 0): 40,
        ("lines", 1): 80,  # -1: now
        ("clicks", 0): 7,  # not named: now
    }
    # At the log end exactly, and 0, are fine.
    spec = parse_until('{"lines": {"0": 100, "1": 0}}', SOURCES)
    assert resolve_until(spec, PARTITIONS, ENDS)[("lines", 1)] == 0


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "--until: expected 'now' or JSON like"),
        ("[1]", "--until: expected a JSON object of topics"),
        ("{}", "--until: expected a JSON object of topics"),
        ('{"views": {"0": 1}}', "--until: topic 'views' is not a source of the app (sources: "),
        ('{"lines": 5}', "--until: topic 'lines' must map partition numbers to offsets"),
        ('{"lines": {"x": 5}}', "--until: partition 'x' of lines is not a number >= 0"),
        ('{"lines": {"-1": 5}}', "partition '-1' of lines"),
        ('{"lines": {"0": -2}}', "--until: offset of lines[0] must be an integer >= 0 or -1"),
        ('{"lines": {"0": "12"}}', "offset of lines[0] must be"),
        ('{"lines": {"0": true}}', "offset of lines[0] must be"),
    ],
)
def test_bad_until_names_the_bad_entry(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_until(text, SOURCES)
    assert says in str(info.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"lines": {"0": 5, "1": 5, "2": 5}}', "--until: lines[2] does not exist (lines has 2"),
        ('{"lines": {"0": 5}}', "--until: name every partition of lines (it has 2); missing 1"),
        ('{"lines": {"0": 101, "1": 5}}', "--until: lines[0] at 101 is beyond its log end 100"),
    ],
)
def test_until_checked_against_the_topics(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_until(parse_until(text, SOURCES), PARTITIONS, ENDS)
    assert says in str(info.value)


def test_records_left_counts_what_is_below_until() -> None:
    until = {("lines", 0): 100, ("lines", 1): 80}
    assert records_left(until, {("lines", 0): 60, ("lines", 1): 90}) == 40
    assert records_left(until, {("lines", 0): 100}) == 80  # no position: from 0
