"""Realistic, seed-deterministic input for the example apps, and a producer for it.

- :func:`word_count_lines` — text lines for ``word_count`` (Zipf-distributed words).
- :func:`patient_events` — pulses, temperatures and checkouts for ``patient_monitoring``,
  with late and malformed records.
- :func:`produce` — create the topic and produce with Java-compatible partitioning;
  :func:`place_records` puts records into partitions the same way without a broker.
"""

from statekeeper.generate.patient_monitoring import patient_events
from statekeeper.generate.producer import GenerateSummary, produce, summarize
from statekeeper.generate.records import (
    LATE_BEYOND_GRACE,
    LATE_WITHIN_GRACE,
    GeneratedRecord,
    place_records,
)
from statekeeper.generate.word_count import word_count_lines
from statekeeper.kafka.partitioning import Partitioner, murmur2, partition_for_key

__all__ = [
    "LATE_BEYOND_GRACE",
    "LATE_WITHIN_GRACE",
    "GenerateSummary",
    "GeneratedRecord",
    "Partitioner",
    "murmur2",
    "partition_for_key",
    "patient_events",
    "place_records",
    "produce",
    "summarize",
    "word_count_lines",
]
