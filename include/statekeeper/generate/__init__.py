"""Produce generated input to Kafka: the records, the producer, the generators' command line.

- :class:`GeneratedRecord` — one record to produce (labelled malformed or late if it is);
- :func:`produce` — create the topic and produce with Java-compatible partitioning;
  :func:`place_records` puts records into partitions the same way without a broker;
- :mod:`statekeeper.generate.command` — the options and output every generator shares.

The shipped apps' generators live beside the apps (``spark_apps/<app>/generator.py``), named
by their specs (``generator:``) for ``statekeeper generate --app``.
"""

from statekeeper.generate.producer import GenerateSummary, produce, summarize
from statekeeper.generate.records import GeneratedRecord, place_records
from statekeeper.kafka.partitioning import Partitioner, murmur2, partition_for_key

__all__ = [
    "GenerateSummary",
    "GeneratedRecord",
    "Partitioner",
    "murmur2",
    "partition_for_key",
    "place_records",
    "produce",
    "summarize",
]
