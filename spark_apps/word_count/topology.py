"""word_count: count words of text lines (the contract's semantics, pinned in CONTRACTS).

lines (value UTF-8 text) → words = ``[a-z0-9']+`` of the lower-cased line → re-keyed by word
through ``<app>-words-repartition`` → count in store ``word-counts`` → topic ``word-counts``
(key word, value the count as an ascii int). A None or non-UTF-8 value goes to the DLQ.

The spec loads this file by path and Spark ships its functions to the executors by value:
import only statekeeper and the standard library here.
"""

from __future__ import annotations

import re

from statekeeper.processing.dsl import Grouped, Materialized, StreamsBuilder
from statekeeper.processing.errors import InvalidRecordError
from statekeeper.processing.topology import Topology
from statekeeper.stores.supplier import StoreSupplier

WORD_RE = re.compile(r"[a-z0-9']+")


def words_of(line: str | None) -> list[str]:
    """The words of a line; a missing value is an invalid record (→ DLQ)."""
    if line is None:
        raise InvalidRecordError("line value is missing")
    return WORD_RE.findall(line.lower())


def _word(_key: object, word: str) -> str:
    return word


def build_topology(
    input_topic: str = "lines",
    output_topic: str = "word-counts",
    store: str = "word-counts",
    supplier: StoreSupplier | None = None,
) -> Topology:
    """The word_count topology on the given topics and store (``supplier``: the counts in a
    custom engine, as spark_apps/word_count_sqlite does; None: RocksDB)."""
    builder = StreamsBuilder()
    lines = builder.stream(input_topic, key_serde="bytes", value_serde="str")
    counts = (
        lines.flat_map_values(words_of)
        .group_by(_word, Grouped.as_("words").with_key_serde("str").with_value_serde("str"))
        .count(Materialized.as_(store, supplier).with_serdes("str", "int"))
    )
    counts.to_stream().map_values(str).to(output_topic, key_serde="str", value_serde="str")
    return builder.build()
