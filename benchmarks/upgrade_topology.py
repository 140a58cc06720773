"""The upgrade benchmark's app, two versions, and the migration between them.

v1 counts records by key (``counts``: str -> int); v2 keeps the count as a JSON object
(``counts``: str -> ``{"count": n}``), so the store's value serde changes (int -> json,
``needs-migration``) and ``counts_v2`` migrates each entry. One subtopology, no
repartition. The benchmark writes specs that load this file by path: import only
statekeeper here.
"""

from __future__ import annotations

from typing import Any

from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.processing.topology import Topology


def build_v1(input_topic: str) -> Topology:
    """Counts by key of ``input_topic`` (values: int)."""
    builder = StreamsBuilder()
    builder.stream(input_topic, key_serde="str", value_serde="bytes").group_by_key().count(
        Materialized.as_("counts").with_serdes("str", "int")
    )
    return builder.build()


def build_v2(input_topic: str) -> Topology:
    """The same count kept as ``{"count": n}`` (values: JSON)."""
    builder = StreamsBuilder()
    builder.stream(input_topic, key_serde="str", value_serde="bytes").group_by_key().aggregate(
        lambda: {"count": 0},
        lambda _key, _value, total: {"count": total["count"] + 1},
        Materialized.as_("counts").with_serdes("str", "json"),
    )
    return builder.build()


def counts_v2(key: str, value: int) -> tuple[str, dict[str, Any]]:
    """v1's entry -> v2's (per record)."""
    return key, {"count": value}
