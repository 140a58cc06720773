"""The one loop that reads partitions to their end: restores, log-end offsets, ranges, tools.

A :class:`PartitionReader` takes a consumer already assigned at the start offsets and
consumes until every partition is done: at its partition EOF (invariant 5: never at the
reported high watermark, which trails the log end on some brokers), or, when it has an end
offset, once the record at ``end - 1`` arrived. It yields :class:`PartitionRun` s: records
of one partition in offset order, events removed. A finished partition is paused (unless
``pause_finished=False``) and records that arrive for it later are dropped
(:attr:`PartitionReader.overshot` says which).

What keeps it fast (measured on loopback, see docs/brokers.md, "Reading fast"):
- a large prefetch (:func:`~statekeeper.kafka.adapter.consumer_config`; one-shot range reads
  bound it, see :func:`~statekeeper.kafka.range_reader.bounded_fetch_overrides`) and a 10 ms
  ``fetch.wait.max.ms`` (:func:`eof_consumer`): EOF is what a read waits for, so the broker
  must not park a fetch at the end;
- ``consume(num_messages, 0.05 s)``: a 1 s timeout stalls at the end of a partition, and
  ``consume()`` waits its whole timeout unless it gets ``num_messages``, so each call asks
  for what is left (end offsets, or size hints such as high watermarks plus one EOF event),
  and the last call of a read returns at once; past a hint that proved stale (a trailing
  high watermark) it takes whatever is queued without waiting, not one record per call;
- per-message work stays in C (``map``, ``any``, ``in``, ``groupby``), never a Python loop.

Errors: :class:`PartitionMissingError`, :class:`OffsetOutOfRangeError`,
:class:`PartitionFetchError` (anything else the broker reports, a
:class:`~statekeeper.errors.BrokerUnavailableError`), :class:`NullKeyError` (``keyed``
reads), and :class:`ReadStalledError` when nothing at all arrives for ``timeout_s``.
"""

from __future__ import annotations

import time
import uuid
from bisect import bisect_left
from collections.abc import Iterator, Mapping
from itertools import groupby
from operator import methodcaller
from typing import Any, NamedTuple

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from statekeeper.errors import BrokerUnavailableError, StatekeeperError

TP = tuple[str, int]

DEFAULT_CHUNK = 20_000
POLL_TIMEOUT_S = 0.05  # a 1 s timeout stalls at the end of a partition (docs/brokers.md)
STALE_HINT_POLL_S = 0.005  # past a stale size hint, when nothing was queued: poll briefly
#: Error codes meaning "this topic or partition does not exist".
MISSING_CODES = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION)
_OUT_OF_RANGE = (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET)
_error = methodcaller("error")
_key = methodcaller("key")
_offset = methodcaller("offset")
_partition = methodcaller("partition")
_topic = methodcaller("topic")


class PartitionReadError(StatekeeperError):
    """A partition reported an error while being read."""

    def __init__(self, message: str, tp: TP, reason: str) -> None:
        super().__init__(message)
        self.tp = tp
        self.reason = reason


class PartitionMissingError(PartitionReadError):
    """The topic or partition does not exist."""


class OffsetOutOfRangeError(PartitionReadError):
    """The start offset is outside the partition's log (deleted, or beyond its end)."""


class PartitionFetchError(PartitionReadError, BrokerUnavailableError):
    """Any other error the broker or client reported for a partition."""


class NullKeyError(PartitionReadError):
    """A ``keyed`` read met a record without a key at ``offset``."""

    def __init__(self, message: str, tp: TP, offset: int) -> None:
        super().__init__(message, tp, "null key")
        self.offset = offset


class ReadStalledError(BrokerUnavailableError):
    """No record and no event arrived for ``timeout_s``; ``pending`` partitions were not done
    and ``positions`` hold the next offset each expected."""

    def __init__(self, pending: list[TP], positions: dict[TP, int], timeout_s: float) -> None:
        shown = ", ".join(f"{t}[{p}] (at offset {positions[(t, p)]})" for t, p in pending[:8])
        more = f" and {len(pending) - 8} more" if len(pending) > 8 else ""
        super().__init__(
            f"no records and no end-of-partition within {timeout_s:g} s for partition(s) "
            f"{shown}{more}: broker unreachable or overloaded, or an offset beyond the log end?"
        )
        self.pending = pending
        self.positions = positions
        self.timeout_s = timeout_s


class PartitionRun(NamedTuple):
    """Consecutive records of one partition in offset order; ``keys`` is their key column
    when the reader is ``keyed`` (else None)."""

    tp: TP
    messages: list[Message]
    keys: list[bytes] | None


def eof_consumer(
    consumer_conf: dict[str, Any], purpose: str = "reader", **overrides: Any
) -> Consumer:
    """A consumer for :class:`PartitionReader`: reports partition EOF promptly, treats an
    offset outside the log as an error (never a silent jump), never commits or joins a
    group. ``overrides`` win (e.g. ``auto.offset.reset``); ``purpose`` names its group id."""
    config = dict(consumer_conf)
    config.update(
        {
            # Only required by the client: assign() joins no group.
            "group.id": f"statekeeper-{purpose}-{uuid.uuid4().hex[:12]}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            # Don't let the broker park an empty fetch: EOF is what the reader waits for.
            "fetch.wait.max.ms": 10,
        }
    )
    config.update(overrides)
    return Consumer(config)


def assign_at(consumer: Consumer, starts: Mapping[TP, int]) -> None:
    """Assign ``consumer`` to each partition at its start offset (or a logical offset such
    as ``OFFSET_BEGINNING``); the client starts fetching in the background at once."""
    consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in starts.items()])


class PartitionReader:
    """Reads an assigned consumer's partitions to their end; iterate it for the records.

    Args:
        consumer: assigned at ``starts`` (:func:`assign_at`), usually an :func:`eof_consumer`.
        starts: where each partition's read starts; a logical offset (``OFFSET_BEGINNING``)
            counts as offset 0 when sizing reads.
        ends: optional end offsets (exclusive); a partition without one reads to its EOF.
            A partition is done when its record at ``end - 1`` arrived, or at its EOF: an
            EOF below ``end`` ends it too, unless ``ends_exist``.
        ends_exist: the ends were found by reading the log (planned ranges), so an EOF below
            one is stale (queued before the records were produced) and the read waits for
            the records; if they never come the read stalls.
        size_hints: expected end of partitions without ``ends`` (e.g. high watermarks);
            they only size ``consume()`` calls.
        timeout_s: longest wait without any record or event before :class:`ReadStalledError`.
        keyed: every record has a key (changelogs): events are found in the key column,
            which the caller needs anyway (an event has no key), instead of one more call
            per message; runs carry that column, and a record without a key raises
            :class:`NullKeyError`.
        pause_finished: pause a partition once done (a one-shot read); without it the
            consumer keeps fetching past the end (a continuous read that continues later).

    After the read, :attr:`positions` hold each partition's next offset (its EOF offset
    for partitions read to EOF) and :attr:`overshot` the partitions with records past their
    end that were taken from the queue and dropped.
    """

    def __init__(
        self,
        consumer: Consumer,
        starts: Mapping[TP, int],
        *,
        ends: Mapping[TP, int] | None = None,
        ends_exist: bool = False,
        size_hints: Mapping[TP, int] | None = None,
        timeout_s: float,
        chunk_size: int = DEFAULT_CHUNK,
        poll_timeout_s: float = POLL_TIMEOUT_S,
        keyed: bool = False,
        pause_finished: bool = True,
    ) -> None:
        self.consumer = consumer
        self.positions: dict[TP, int] = {tp: max(0, start) for tp, start in starts.items()}
        self.ends: dict[TP, int] = dict(ends or {})
        self.ends_exist = ends_exist
        self.size_hints: dict[TP, int] = dict(size_hints or {})
        self.timeout_s = timeout_s
        self.chunk_size = chunk_size
        self.poll_timeout_s = poll_timeout_s
        self.keyed = keyed
        self.pause_finished = pause_finished
        self.pending: set[TP] = set(starts)
        self.overshot: set[TP] = set()
        self._got_records = False  # whether the last consume() returned anything

    def __iter__(self) -> Iterator[PartitionRun]:
        consumer, pending, positions = self.consumer, self.pending, self.positions
        topics = {t for t, _ in positions}
        only_topic = next(iter(topics)) if len(topics) == 1 else None
        only_tp = next(iter(positions)) if len(positions) == 1 else None
        deadline = time.monotonic() + self.timeout_s
        while pending:
            msgs = consumer.consume(*self._next_ask())
            self._got_records = bool(msgs)
            if not msgs:
                if time.monotonic() > deadline:
                    stuck = sorted(pending)
                    raise ReadStalledError(stuck, dict(positions), self.timeout_s)
                continue
            deadline = time.monotonic() + self.timeout_s
            keys: list[Any] | None = None
            events: list[Message] = []
            if self.keyed:
                keys = list(map(_key, msgs))
                if None in keys:  # scanned in C; only events and corrupt records lack a key
                    msgs, keys, events = _split_keyed(msgs, keys)
            elif any(map(_error, msgs)):  # KafkaError is always truthy; None is not
                events = [m for m in msgs if m.error() is not None]
                msgs = [m for m in msgs if m.error() is None]
            if only_tp is not None:
                runs: Any = [(only_tp, msgs, keys)] if msgs else ()
            else:
                runs = _runs(msgs, keys, only_topic)
            for tp, run, run_keys in runs:
                if tp not in pending:
                    self.overshot.add(tp)  # past the end of a finished partition
                    continue
                end = self.ends.get(tp)
                if end is not None and run[-1].offset() >= end - 1:
                    if run[-1].offset() >= end:
                        cut = bisect_left(run, end, key=_offset)
                        run = run[:cut]
                        run_keys = run_keys[:cut] if run_keys is not None else None
                        self.overshot.add(tp)
                    self._finish(tp)
                if run:
                    positions[tp] = run[-1].offset() + 1
                    yield PartitionRun(tp, run, run_keys)
            for event in events:
                self._handle_event(event)

    def drain(self) -> dict[TP, int]:
        """Read to the end without keeping records; return :attr:`positions`."""
        for _ in self:
            pass
        return self.positions

    def _next_ask(self) -> tuple[int, float]:
        """(num_messages, timeout) for the next consume(): what the partitions still need,
        so the last call returns as soon as it arrives instead of waiting out its timeout."""
        wanted = 0
        for tp in self.pending:
            end = self.ends.get(tp)
            if end is not None:
                wanted += end - self.positions[tp]
                continue
            hint = self.size_hints.get(tp)
            if hint is None:
                return self.chunk_size, self.poll_timeout_s
            if self.positions[tp] > hint:
                # Read past its hint: a high watermark that trails the log end (the start of
                # the last produce batch + 1). The rest of that batch came in the same fetch,
                # so take what is queued without waiting (not one record per call); only if
                # nothing was, wait briefly for the next fetch.
                return self.chunk_size, 0.0 if self._got_records else STALE_HINT_POLL_S
            wanted += hint - self.positions[tp] + 1  # the records left plus the EOF event
        return max(1, min(self.chunk_size, wanted)), self.poll_timeout_s

    def _finish(self, tp: TP) -> None:
        if tp in self.pending:
            self.pending.discard(tp)
            if self.pause_finished:
                self.consumer.pause([TopicPartition(tp[0], tp[1])])

    def _handle_event(self, msg: Message) -> None:
        err = msg.error()
        code = err.code()
        tp = (msg.topic(), msg.partition())
        if code == KafkaError._PARTITION_EOF:
            if tp in self.pending:
                end = self.ends.get(tp)
                if end is None or msg.offset() >= end or not self.ends_exist:
                    if end is None:
                        self.positions[tp] = max(self.positions[tp], msg.offset())
                    self._finish(tp)
            return
        reason = err.str()
        where = f"{tp[0]}[{tp[1]}]" if tp[0] else "the broker"
        if code in MISSING_CODES:
            raise PartitionMissingError(f"{where} does not exist: {reason}", tp, reason)
        if code in _OUT_OF_RANGE or "out of range" in reason.lower():
            raise OffsetOutOfRangeError(
                f"reading {where} from offset {self.positions.get(tp, -1)}: {reason}", tp, reason
            )
        raise PartitionFetchError(f"reading {where}: {reason}", tp, reason)


def _split_keyed(
    msgs: list[Message], keys: list[Any]
) -> tuple[list[Message], list[bytes], list[Message]]:
    """Records and their keys apart from events; a record without a key is an error."""
    kept: list[Message] = []
    kept_keys: list[bytes] = []
    events: list[Message] = []
    for msg, key in zip(msgs, keys, strict=True):
        if key is not None:
            kept.append(msg)
            kept_keys.append(key)
        elif msg.error() is not None:
            events.append(msg)
        else:
            tp = (msg.topic(), msg.partition())
            raise NullKeyError(
                f"{tp[0]}[{tp[1]}] offset {msg.offset()} has a null key", tp, msg.offset()
            )
    return kept, kept_keys, events


def _runs(
    msgs: list[Message], keys: list[Any] | None, only_topic: str | None
) -> Iterator[tuple[TP, list[Message], list[Any] | None]]:
    """Split ``msgs`` (and ``keys``) into maximal runs of one partition (librdkafka hands out
    whole fetched batches, so a chunk is a few long runs)."""
    if not msgs:
        return
    if only_topic is None:
        tps: list[Any] = list(zip(map(_topic, msgs), map(_partition, msgs), strict=True))
    else:
        tps = list(map(_partition, msgs))
    first = tps[0]
    if tps.count(first) == len(tps):
        yield (first if only_topic is None else (only_topic, first)), msgs, keys
        return
    start = 0
    for tp, group in groupby(tps):
        stop = start + sum(1 for _ in group)
        run_keys = keys[start:stop] if keys is not None else None
        yield (tp if only_topic is None else (only_topic, tp)), msgs[start:stop], run_keys
        start = stop
