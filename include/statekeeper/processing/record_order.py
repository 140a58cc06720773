"""Which input records a task processes, and in which order.

Records at offsets below the state's processed offsets were applied by a committed batch
and are skipped (invariant 3, docs/invariants.md). Records of several input partitions are merged
like Kafka Streams does: always take the partition head with the smallest timestamp, keeping
each partition's offset order; ties go to the topic that sorts first.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from operator import attrgetter
from typing import TypeVar

from statekeeper.kafka.model import KafkaRecord

Seq = TypeVar("Seq", bound=Sequence[KafkaRecord])
_OFFSET = attrgetter("offset")
_TS = attrgetter("timestamp_ms")


def unprocessed(records: Seq, next_offset: int | None) -> Seq:
    """The records at or above ``next_offset`` (records are in offset order)."""
    if next_offset is None or not records or records[0].offset >= next_offset:
        return records
    return records[bisect_left(records, next_offset, key=_OFFSET) :]


def merge_by_timestamp(lists: Sequence[Sequence[KafkaRecord]]) -> Iterator[KafkaRecord]:
    """Merge per-partition record lists by head timestamp (ties: topic name order)."""
    lists = sorted((r for r in lists if r), key=lambda r: (r[0].topic, r[0].partition))
    if len(lists) == 1:
        return iter(lists[0])
    return heapq.merge(*lists, key=_TS)
