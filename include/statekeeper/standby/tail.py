"""Reading a task's changelog partitions on, step after step, with one consumer kept open.

A standby's first step restores each store with the restorer (which verifies the copy's
marker against the changelog and rebuilds an inconsistent copy); after that, re-reading from
the marker every step would re-read the whole uncommitted tail each time (a task commits every
``commit_interval_ms``, so under load that tail grows to seconds of records). A
:class:`ChangelogTail` instead keeps a consumer assigned past what it has read and remembers
the records after the last marker: each :meth:`ChangelogTail.read` takes only what is new,
applies what a marker closes in the store's restore format (records and marker metadata in one
write, as the restorer does), and keeps the rest for a later marker.

A step never waits: it takes what the consumer's background fetcher has queued (asking the
broker for offsets would queue behind the fetcher's long poll on the same connection, and
``consume()`` waits its whole timeout for a full chunk), so it costs well under a millisecond
when nothing changed, and a commit reaches the copy within a fetch or two. It is not a read to
EOF (invariant 5 binds restores, and an active task's open still does one).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import groupby
from operator import methodcaller
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from statekeeper.changelog.committed import CommittedRecords
from statekeeper.changelog.fencing import CommitSplitter, FenceCounts
from statekeeper.changelog.records import CommitMarker
from statekeeper.errors import BrokerUnavailableError, ChangelogCorruptError
from statekeeper.gc_pause import cycle_gc_paused
from statekeeper.kafka.partition_reader import TP, assign_at, eof_consumer
from statekeeper.stores.base import StoreMetadata

#: Records per consume() call, and at most per read.
CHUNK = 20_000
MAX_RECORDS_PER_READ = 200_000
#: The broker may hold an empty fetch this long: an idle tail must not poll it every 10 ms
#: (a new commit reaches the copy at most this much later on a broker that holds fetches).
FETCH_WAIT_MS = 100
#: A tail consumer lives as long as its standby, one per standby task: a prefetch bounded
#: below the restore reader's (which buffers up to ~1M records for a one-off read to EOF)
#: still carries ~100k records between two steps.
TAIL_CONSUMER_OVERRIDES: dict[str, int] = {
    "fetch.wait.max.ms": FETCH_WAIT_MS,
    "queued.min.messages": 100_000,
    "queued.max.messages.kbytes": 16 * 1024,
    "fetch.max.bytes": 8 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
}

_key = methodcaller("key")


def _tp(msg: Any) -> TP:
    return msg.topic(), msg.partition()


#: Called after each write with (partition, the marker's metadata, records applied); it may
#: raise to end the step (the tail is then unusable and must be closed).
OnApplied = Callable[[TP, StoreMetadata, int], None]


class _Partition:
    """One store's changelog partition: where the read is, and what waits for a marker."""

    def __init__(
        self, tp: TP, store: Any, start: int | None, fence: int, tail: ChangelogTail
    ) -> None:
        self.store = store
        self.position = 0 if start is None else start
        self.committed = CommittedRecords()
        self.splitter = CommitSplitter(f"{tp[0]}[{tp[1]}]", self._on_commit, fence=fence)
        self._tp, self._tail = tp, tail

    def _on_commit(
        self, records: dict[bytes, bytes | None], count: int, marker: CommitMarker, offset: int
    ) -> None:
        if self.committed.add(records, count, marker, offset) >= self._tail.batch_records:
            self._tail.write(self._tp, self)


class ChangelogTail:
    """Reads store changelog partitions (one topic each, one partition number) from given
    offsets on (see the module docstring).

    Args:
        consumer_config: base consumer settings (an EOF consumer is made from them).
        stores: per changelog partition, the open store its records go to.
        starts: per partition, the first offset to read (one past the copy's marker; None:
            from the beginning, the copy has no marker yet).
        fences: per partition, the epoch of the copy's marker (reads start fenced at it).
        batch_records: keys per store write.
        on_applied: see :data:`OnApplied`.
    """

    def __init__(
        self,
        consumer_config: dict[str, Any],
        stores: dict[TP, Any],
        starts: dict[TP, int | None],
        *,
        batch_records: int,
        on_applied: OnApplied,
        fences: dict[TP, int] | None = None,
    ) -> None:
        fences = fences or {}
        self.batch_records = batch_records
        self._parts = {
            tp: _Partition(tp, stores[tp], starts.get(tp), fences.get(tp, 0), self) for tp in stores
        }
        self._on_applied = on_applied
        self._consumer = eof_consumer(consumer_config, "standby", **TAIL_CONSUMER_OVERRIDES)
        assign_at(
            self._consumer,
            {tp: OFFSET_BEGINNING if starts.get(tp) is None else starts[tp] for tp in stores},
        )

    def set_stores(self, stores: dict[TP, Any]) -> None:
        """Write to these (reopened) stores from now on."""
        for tp, part in self._parts.items():
            part.store = stores[tp]

    def uncommitted_keys(self, tp: TP) -> int:
        """Keys read after the last marker of ``tp`` (not applied)."""
        return len(self._parts[tp].splitter.pending)

    def fenced(self) -> FenceCounts:
        """What fencing dropped on every partition so far."""
        total = FenceCounts()
        for part in self._parts.values():
            total += part.splitter.fenced
        return total

    def read(self) -> dict[TP, int | None]:
        """Apply what the consumer has fetched so far (never waiting: the next step takes
        the rest); returns each partition's high watermark as the last fetch reported it
        (None before the first)."""
        taken = 0
        # Bounded, so a step behind a writer faster than it still ends (and reports).
        with cycle_gc_paused():
            while taken < MAX_RECORDS_PER_READ and (msgs := self._consumer.consume(CHUNK, 0)):
                self._take(msgs)
                taken += len(msgs)
        for tp, part in self._parts.items():
            self.write(tp, part)
        highs: dict[TP, int | None] = {}
        for tp in self._parts:
            _, high = self._consumer.get_watermark_offsets(TopicPartition(*tp), cached=True)
            highs[tp] = high if high >= 0 else None
        return highs

    def unread(self, tp: TP, high: int | None) -> int | None:
        """Records of ``tp`` below ``high`` not read yet (None: ``high`` unknown)."""
        return None if high is None else max(0, high - self._parts[tp].position)

    def _take(self, msgs: list[Any]) -> None:
        for tp, run in groupby(msgs, key=_tp):
            records = list(run)
            part = self._parts.get(tp)
            keys = list(map(_key, records))
            if None in keys:
                records, keys = self._without_events(tp, records, keys)
            if part is None or not records:
                continue
            self._split(tp, part, records, keys)

    @staticmethod
    def _without_events(tp: TP, records: list[Any], keys: list[Any]) -> tuple[list, list]:
        kept, kept_keys = [], []
        for msg, key in zip(records, keys, strict=True):
            err = msg.error()
            if err is None and key is not None:
                kept.append(msg)
                kept_keys.append(key)
            elif err is None:
                raise ChangelogCorruptError(
                    f"changelog {tp[0]}[{tp[1]}] offset {msg.offset()} has a null key; changelog "
                    "records always carry the store key"
                )
            elif err.code() != KafkaError._PARTITION_EOF:
                raise BrokerUnavailableError(f"standby: reading {tp[0]}[{tp[1]}]: {err.str()}")
        return kept, kept_keys

    def _split(self, tp: TP, part: _Partition, records: list[Any], keys: list[bytes]) -> None:
        """Sort records into closed (a marker follows) and uncommitted, as the restorer
        does, fencing stale epochs (:mod:`statekeeper.changelog.fencing`)."""
        part.splitter.take(records, keys)
        part.position = records[-1].offset() + 1

    def write(self, tp: TP, part: _Partition) -> None:
        """Apply what markers closed on ``tp`` so far (records and metadata in one write)."""
        meta, count = part.committed.write_to(part.store)
        if meta is not None:
            self._on_applied(tp, meta, count)

    def close(self) -> None:
        self._consumer.close()
