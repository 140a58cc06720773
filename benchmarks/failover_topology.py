"""The failover benchmark's app: count records by key (one store, no repartition).

keys (key UTF-8 text, value ignored) → group by key → count in store ``key-counts``. The
benchmark writes a spec that loads this file by path, and Spark ships its functions to the
executors by value: import only statekeeper here.
"""

from __future__ import annotations

from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.processing.topology import Topology


def build_topology(input_topic: str = "keys", store: str = "key-counts") -> Topology:
    """Counts by key of ``input_topic`` in ``store`` (no output topic: the store is read)."""
    builder = StreamsBuilder()
    builder.stream(input_topic, key_serde="str", value_serde="bytes").group_by_key().count(
        Materialized.as_(store).with_serdes("str", "int")
    )
    return builder.build()
