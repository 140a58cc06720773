"""word_count v2: count words of text lines, and remember when each word was first seen.

lines (value UTF-8 text) → words = ``[a-z0-9']+`` of the lower-cased line → re-keyed by
word through ``<app>-words-repartition`` (as v1) → each word valued with its line's
timestamp → store ``word-counts``: per word ``{"count": n, "first_seen_ms": ts}`` (JSON;
v1 held the count as an int) → topic ``word-counts-v2`` (key word, the JSON value). A None
or non-UTF-8 value goes to the DLQ.

``first_seen_ms`` is the smallest timestamp of the lines the word was counted in, or None
for a word v1 counted before the upgrade (v1 did not record when: migrations.py). The store
and grouping keep v1's names, so v1's state is carried over to them.

The spec loads this file by path and Spark ships its functions to the executors by value:
import only statekeeper and the standard library here.
"""

from __future__ import annotations

import re
from typing import Any

from statekeeper.processing.dsl import Grouped, Materialized, StreamsBuilder
from statekeeper.processing.errors import InvalidRecordError
from statekeeper.processing.processor import Processor, Record
from statekeeper.processing.topology import Topology

WORD_RE = re.compile(r"[a-z0-9']+")


def words_of(line: str | None) -> list[str]:
    """The words of a line (v1's rule); a missing value is an invalid record (→ DLQ)."""
    if line is None:
        raise InvalidRecordError("line value is missing")
    return WORD_RE.findall(line.lower())


def _word(_key: object, word: str) -> str:
    return word


class LineTime(Processor):
    """A word's record → valued with its line's timestamp (an aggregation sees values, not
    timestamps); the key, the word, is kept."""

    def process(self, record: Record) -> None:
        self.context.forward(record.with_value(record.timestamp))


def no_entry() -> dict[str, Any]:
    """A word not counted yet (its first occurrence sets ``first_seen_ms``)."""
    return {"count": 0}


def seen(_word: str, timestamp: int, entry: dict[str, Any]) -> dict[str, Any]:
    """One more occurrence of a word, in a line of ``timestamp``."""
    if "first_seen_ms" not in entry:
        first = timestamp
    elif entry["first_seen_ms"] is None:  # counted by v1: seen before any v2 record
        first = None
    else:
        first = min(entry["first_seen_ms"], timestamp)
    return {"count": entry["count"] + 1, "first_seen_ms": first}


def build_topology(
    input_topic: str = "lines",
    output_topic: str = "word-counts-v2",
    store: str = "word-counts",
    word_partitions: int | None = None,
) -> Topology:
    """The word_count v2 topology on the given topics and store. ``word_partitions``: the
    words repartition topic's partition count (default: the input's); another count than
    v1's moves words to other tasks, which the migration does (re-keying)."""
    builder = StreamsBuilder()
    lines = builder.stream(input_topic, key_serde="bytes", value_serde="str")
    words = Grouped.as_("words").with_key_serde("str").with_value_serde("str")
    if word_partitions is not None:
        words = words.with_partitions(int(word_partitions))
    counts = (
        lines.flat_map_values(words_of)
        .select_key(_word)
        .repartition(words)
        .process_values(LineTime, name="line-time")
        .group_by_key(Grouped.with_("str", "int"))
        .aggregate(no_entry, seen, Materialized.as_(store).with_serdes("str", "json"))
    )
    counts.to_stream().to(output_topic, key_serde="str", value_serde="json")
    return builder.build()
