"""Measure a changelog topic's contents: records, distinct keys, tombstones, commit markers.

A plain read through :class:`~statekeeper.kafka.partition_reader.PartitionReader` (not a
Spark batch), bounded per partition: a partition longer than ``max_records_per_partition``
is sampled from its log start and its total is estimated from the high watermark (a lower
bound on brokers whose watermark trails the log end).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statekeeper.changelog.fencing import CommitSplitter, is_control_key
from statekeeper.errors import ChangelogCorruptError
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.offsets import watermarks
from statekeeper.kafka.partition_reader import PartitionReader, assign_at, eof_consumer

#: Records read per partition before the rest is estimated (keeps an audit to seconds).
DEFAULT_MAX_RECORDS_PER_PARTITION = 500_000


@dataclass(frozen=True)
class ChangelogContents:
    """What a read of one changelog found.

    ``records`` counts every record of the log (estimated where ``sampled``); the other
    counts cover the records read (``records_read``). ``distinct_keys`` excludes markers;
    ``markers`` counts commit markers and epoch begin records; ``fenced`` the records and
    markers of superseded epochs (a frozen writer's, ignored by every reader).
    """

    records: int
    records_read: int
    distinct_keys: int
    tombstones: int
    markers: int
    sampled: bool
    fenced: int = 0

    @property
    def tombstone_share(self) -> float:
        """Tombstones among the data records read (markers excluded)."""
        data = self.records_read - self.markers
        return self.tombstones / data if data else 0.0

    @property
    def superseded_share(self) -> float:
        """Data records read that a later record of the same key supersedes: what
        compaction could drop, and the most a fresh snapshot cuts from a full replay."""
        data = self.records_read - self.markers
        return (data - self.distinct_keys) / data if data else 0.0


def measure_changelog(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION,
    timeout_s: float = 30.0,
    **consumer_overrides: Any,
) -> ChangelogContents:
    """Read ``topic`` from each partition's log start, up to the cap, and count."""
    tps = [(topic, p) for p in range(partitions)]
    consumer = eof_consumer(consumer_config(bootstrap, **consumer_overrides), "audit")
    keys: set[bytes] = set()
    read = tombstones = markers = 0
    # The restorer's fencing rule, to count what a frozen writer left behind.
    splitters: dict[tuple[str, int], CommitSplitter] = {}
    undecodable: set[tuple[str, int]] = set()
    try:
        starts, highs = watermarks(consumer, tps, timeout_s)
        caps = {tp: starts[tp] + max_records_per_partition for tp in tps}
        assign_at(consumer, starts)
        reader = PartitionReader(
            consumer, starts, ends=caps, size_hints=highs, timeout_s=timeout_s, keyed=True
        )
        for run in reader:
            assert run.keys is not None
            read += len(run.messages)
            fence = splitters.get(run.tp)
            if fence is None:
                fence = splitters[run.tp] = CommitSplitter(f"{run.tp[0]}[{run.tp[1]}]", _ignore)
            if run.tp not in undecodable:
                try:
                    fence.take(run.messages, run.keys)
                except ChangelogCorruptError:  # counted as far as it went; restores will fail
                    undecodable.add(run.tp)
            for message, key in zip(run.messages, run.keys, strict=True):
                if is_control_key(key):  # commit markers and epoch begin records
                    markers += 1
                    continue
                keys.add(key)
                if message.value() is None:
                    tombstones += 1
        positions = reader.positions
    finally:
        consumer.close()
    sampled = False
    total = 0
    for tp in tps:
        got = positions[tp] - starts[tp]
        if positions[tp] >= caps[tp]:
            sampled = True
            got = max(got, highs[tp] - starts[tp])
        total += got
    fenced = sum(s.fenced.total for s in splitters.values())
    return ChangelogContents(total, read, len(keys), tombstones, markers, sampled, fenced)


def _ignore(*_: Any) -> None:
    """Commits are not applied anywhere: the audit only counts."""
