"""Read exact offset ranges ``[start, end)`` of many partitions, fast.

One consumer is assigned every non-empty range at its start offset and read by the shared
:class:`~statekeeper.kafka.partition_reader.PartitionReader` in large chunks
(``consume(num_messages=20000, timeout=0.05)``; a one-shot read prefetches what its ranges
need, a continuous one up to :data:`READ_AHEAD_KBYTES`): records at or past a range's end are
dropped, and a partition is paused as soon as its range is complete: its record at
``end - 1`` arrived, or partition EOF at or past ``end`` (the last offsets of a range may be
transaction markers or compacted away, which no consumer ever sees).

Three views of the same stream:
- :func:`iter_partition_runs` yields ``(tp, messages)``: raw ``confluent_kafka.Message``
  runs of one partition (for columnar conversion, e.g. the Spark source's Arrow batches);
- :func:`iter_range_chunks` yields lists of :class:`KafkaRecord`, one partition per list;
- :func:`read_ranges` collects everything per ``tp_key``, and :func:`read_range_runs` does
  too without building records (:class:`~statekeeper.kafka.consumed_run.ConsumedRun`).
Within one partition records always come in offset order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from statekeeper.errors import BrokerUnavailableError, StatekeeperError
from statekeeper.kafka.adapter import READ_TO_EOF_PREFETCH
from statekeeper.kafka.consumed_run import ConsumedRun, to_records
from statekeeper.kafka.model import KafkaRecord, OffsetRange, tp_key
from statekeeper.kafka.offsets import log_end_offsets, log_start_offsets, watermarks
from statekeeper.kafka.partition_reader import (
    DEFAULT_CHUNK,
    OffsetOutOfRangeError,
    PartitionFetchError,
    PartitionMissingError,
    PartitionReader,
    ReadStalledError,
    assign_at,
    eof_consumer,
)

TP = tuple[str, int]

READ_AHEAD_KBYTES = 32 * 1024  # per partition of a continuous fetch (librdkafka: 64 MiB)
# A continuous fetch idles at the log end between batches. The broker answers a parked fetch
# as soon as data arrives, so a longer wait adds no latency to new records; it only delays
# the EOF that ends a range closing on an offset gap. At 10 ms, four idle consumers cost the
# embedded broker ~16 % of a core (measured); at 100 ms, a tenth of that.
CONTINUOUS_FETCH_WAIT_MS = 100
BOUNDED_FETCH_BYTES = 1024 * 1024  # per partition and fetch of a one-shot read


def bounded_fetch_overrides(
    wanted: dict[TP, tuple[int, int]], conf: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Consumer settings for a one-shot read of ``wanted`` ranges: fetch no further ahead
    than the ranges need. Only settings of ``conf`` still at the read-to-EOF default are
    replaced; a value the caller chose (a source's ``kafka.*`` option) stays.

    The read-to-EOF prefetch of :func:`~statekeeper.kafka.adapter.consumer_config` (50 MiB
    fetches, a million queued records) makes the client parse the whole rest of the log
    after a short range and throw it away: a 12.5k-record range at the start of a 250k
    partition cost 0.17-0.2 s of client CPU that way, 0.06-0.08 s with these settings, and
    its cost no longer depends on how much log follows (measured on loopback). Fetches of
    1 MiB per partition are Kafka's default; a larger record batch still comes whole.
    """
    longest = max((end - start for start, end in wanted.values()), default=1)
    bounded = {
        "queued.min.messages": max(1, min(longest, READ_TO_EOF_PREFETCH["queued.min.messages"])),
        "max.partition.fetch.bytes": BOUNDED_FETCH_BYTES,
        "fetch.max.bytes": min(
            READ_TO_EOF_PREFETCH["fetch.max.bytes"], BOUNDED_FETCH_BYTES * max(1, len(wanted))
        ),
    }
    if conf is None:
        return bounded
    return {k: v for k, v in bounded.items() if conf.get(k) == READ_TO_EOF_PREFETCH[k]}


class RangeReadError(StatekeeperError):
    """A range cannot be read as asked: its data is gone, or its end is beyond the log."""


def read_ranges(
    consumer_conf: dict[str, Any], ranges: Iterable[OffsetRange], timeout_s: float = 30.0
) -> dict[str, list[KafkaRecord]]:
    """Every record of every range, keyed by ``tp_key``, each list in offset order.

    Every requested range gets a key, an empty range an empty list. Raises
    :class:`BrokerUnavailableError` when no progress is made for ``timeout_s`` and
    :class:`RangeReadError` when a range starts below the log start (data deleted by
    retention) or ends beyond the log end.
    """
    return {tp: list(run) for tp, run in read_range_runs(consumer_conf, ranges, timeout_s).items()}


def read_range_runs(
    consumer_conf: dict[str, Any], ranges: Iterable[OffsetRange], timeout_s: float = 30.0
) -> dict[str, ConsumedRun]:
    """:func:`read_ranges` without building records: one :class:`ConsumedRun` per range."""
    with RangeFetch(consumer_conf, ranges, timeout_s) as fetch:
        return fetch.read_runs()


def iter_range_chunks(
    consumer_conf: dict[str, Any],
    ranges: Iterable[OffsetRange],
    timeout_s: float = 30.0,
    chunk_size: int = DEFAULT_CHUNK,
) -> Iterator[list[KafkaRecord]]:
    """Lists of :class:`KafkaRecord` as they arrive, each list from one partition (partitions
    interleave across lists; each partition's records stay in offset order). Errors as
    :func:`read_ranges`."""
    for (topic, partition), msgs in iter_partition_runs(
        consumer_conf, ranges, timeout_s, chunk_size
    ):
        yield to_records(topic, partition, msgs)


def iter_partition_runs(
    consumer_conf: dict[str, Any],
    ranges: Iterable[OffsetRange],
    timeout_s: float = 30.0,
    chunk_size: int = DEFAULT_CHUNK,
) -> Iterator[tuple[TP, list[Message]]]:
    """``((topic, partition), messages)`` runs of consumed records (no error events) inside
    the ranges, each run from one partition and in offset order; see the module docs."""
    with RangeFetch(consumer_conf, ranges, timeout_s, chunk_size) as fetch:
        yield from fetch.runs()


class RangeFetch:
    """Ranges whose fetch has started: the consumer is assigned when this is built, so
    librdkafka fetches in the background while the caller does other work (a task opening
    its stores); :meth:`runs` or :meth:`read_runs` then take the records. Close it (or use
    it as a context manager).

    With ``continuous=True`` a partition is not paused when its range is complete: the
    consumer keeps fetching past the end while idle, and :meth:`continue_with` reuses it for
    ranges that start exactly where these ended (the next micro-batch of the same task), so
    those records are usually already local.
    """

    def __init__(
        self,
        consumer_conf: dict[str, Any],
        ranges: Iterable[OffsetRange],
        timeout_s: float = 30.0,
        chunk_size: int = DEFAULT_CHUNK,
        *,
        continuous: bool = False,
    ) -> None:
        self.ranges = list(ranges)
        self._conf = consumer_conf
        self._timeout_s = timeout_s
        self._chunk_size = chunk_size
        self._continuous = continuous
        self._wanted = _merge_ranges(self.ranges)
        self._next: dict[TP, int] | None = None  # where the consumer continues, if it can
        self._consumer: Consumer | None = None
        if self._wanted:
            # eof_consumer: an offset out of range is an error, never a silent jump.
            overrides: dict[str, Any] = {}
            if continuous:  # it reads ahead while idle: bound what it holds per partition
                overrides["queued.max.messages.kbytes"] = READ_AHEAD_KBYTES
                overrides["fetch.wait.max.ms"] = CONTINUOUS_FETCH_WAIT_MS
            else:
                overrides.update(bounded_fetch_overrides(self._wanted, consumer_conf))
            self._consumer = eof_consumer(consumer_conf, "ranges", **overrides)
            assign_at(self._consumer, {tp: start for tp, (start, _) in self._wanted.items()})

    def runs(self) -> Iterator[tuple[TP, list[Message]]]:
        """The records as ``(tp, messages)`` runs (each range once)."""
        consumer, wanted = self._consumer, self._wanted
        if consumer is None or not wanted:
            return
        self._wanted, self._next = {}, None
        overshot: set[TP] = set()
        try:
            yield from _consume(
                consumer,
                self._conf,
                wanted,
                self._timeout_s,
                self._chunk_size,
                pause=not self._continuous,
                overshot=overshot,
            )
        except BaseException:
            self.close()
            raise
        if self._continuous:
            try:
                for t, p in overshot & wanted.keys():  # records past its end left the queue
                    consumer.seek(TopicPartition(t, p, wanted[(t, p)][1]))
            except KafkaException:
                return  # not continuable; the next batch starts a new fetch
            self._next = {tp: end for tp, (_, end) in wanted.items()}

    def read_runs(self) -> dict[str, ConsumedRun]:
        """Every range's records as a :class:`ConsumedRun`, keyed by ``tp_key`` (an empty
        range gets an empty run)."""
        messages: dict[TP, list[Message]] = {(r.topic, r.partition): [] for r in self.ranges}
        for tp, msgs in self.runs():
            messages[tp].extend(msgs)
        return {tp_key(t, p): ConsumedRun(t, p, msgs) for (t, p), msgs in messages.items()}

    def continue_with(self, ranges: Iterable[OffsetRange]) -> bool:
        """Take ``ranges`` next if each non-empty one starts where this fetch's range of
        that partition ended (and nothing was consumed past an end); False: close this and
        start a new fetch."""
        ranges = list(ranges)
        wanted = _merge_ranges(ranges)
        if self._consumer is None or self._next is None:
            return False
        if any(self._next.get(tp) != start for tp, (start, _) in wanted.items()):
            return False
        self.ranges, self._wanted = ranges, wanted
        return True

    def close(self) -> None:
        self._next = None
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()

    def __enter__(self) -> RangeFetch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _consume(
    consumer: Consumer,
    consumer_conf: dict[str, Any],
    wanted: dict[TP, tuple[int, int]],
    timeout_s: float,
    chunk_size: int,
    *,
    pause: bool = True,
    overshot: set[TP] | None = None,
) -> Iterator[tuple[TP, list[Message]]]:
    """Records of ``wanted`` from an assigned consumer, read by the shared
    :class:`PartitionReader`. A finished partition is paused (``pause``) or left fetching;
    records past an end that were taken from the queue are dropped and their partition added
    to ``overshot``. Read errors become :class:`RangeReadError` where the range is at fault."""
    reader = PartitionReader(
        consumer,
        {tp: start for tp, (start, _) in wanted.items()},
        ends={tp: end for tp, (_, end) in wanted.items()},
        # The ranges were planned from log ends: an EOF below one is stale.
        ends_exist=True,
        timeout_s=timeout_s,
        chunk_size=chunk_size,
        pause_finished=pause,
    )
    try:
        for tp, run, _ in reader:
            yield tp, run
    except ReadStalledError as exc:
        _raise_stalled(consumer_conf, wanted, exc.positions, exc.pending, timeout_s)
    except PartitionMissingError as exc:
        start, end = wanted.get(exc.tp, (-1, -1))
        raise RangeReadError(
            f"cannot read offsets {start}..{end - 1} of {exc.tp[0]}[{exc.tp[1]}]: the partition "
            f"does not exist ({exc.reason})"
        ) from exc
    except OffsetOutOfRangeError as exc:
        start, end = wanted.get(exc.tp, (-1, -1))
        raise RangeReadError(
            _out_of_range_message(consumer, exc.tp, start, end, exc.reason)
        ) from exc
    except PartitionFetchError as exc:
        start, end = wanted.get(exc.tp, (-1, -1))
        raise BrokerUnavailableError(
            f"reading offsets {start}..{end - 1} of {exc.tp[0]}[{exc.tp[1]}]: {exc.reason}"
        ) from exc
    finally:
        if overshot is not None:
            overshot.update(reader.overshot)


def _raise_stalled(
    consumer_conf: dict[str, Any],
    wanted: dict[TP, tuple[int, int]],
    position: dict[TP, int],
    stuck: list[TP],
    timeout_s: float,
) -> None:
    """No progress for ``timeout_s`` on the ``stuck`` partitions: say why, as precisely as
    the broker lets us."""
    probe_s = min(timeout_s, 5.0)
    try:
        lows = log_start_offsets(consumer_conf, stuck, probe_s)
        ends = log_end_offsets(consumer_conf, stuck, probe_s)
    except StatekeeperError as exc:
        raise BrokerUnavailableError(
            f"no progress reading {_describe_ranges(stuck, wanted, position)} within "
            f"{timeout_s:g} s, and the broker does not answer offset requests ({exc})"
        ) from exc
    for tp in stuck:
        start, end = wanted[tp]
        where = f"{tp[0]}[{tp[1]}] offsets {start}..{end - 1}"
        if start < lows[tp]:
            raise RangeReadError(
                f"{where}: the range starts below the log start offset {lows[tp]}; the records "
                "were deleted (retention) before they were read"
            )
        if end > ends[tp]:
            raise RangeReadError(
                f"{where}: the log ends at offset {ends[tp]}, before the range's end {end}; the "
                "range was planned beyond the data (topic recreated or truncated?)"
            )
    raise BrokerUnavailableError(
        f"no progress reading {_describe_ranges(stuck, wanted, position)} within {timeout_s:g} "
        "s although the data exists (broker overloaded?)"
    )


def _describe_ranges(
    tps: list[TP], wanted: dict[TP, tuple[int, int]], position: dict[TP, int]
) -> str:
    shown = [
        f"{t}[{p}] offsets {wanted[(t, p)][0]}..{wanted[(t, p)][1] - 1} "
        f"(read up to {position[(t, p)] - 1})"
        for t, p in tps[:8]
    ]
    more = f" and {len(tps) - 8} more" if len(tps) > 8 else ""
    return "; ".join(shown) + more


def _out_of_range_message(consumer: Consumer, tp: TP, start: int, end: int, reason: str) -> str:
    where = f"{tp[0]}[{tp[1]}] offsets {start}..{end - 1}"
    try:
        lows, _ = watermarks(consumer, [tp], 5.0)
        low = lows[tp]
    except StatekeeperError:
        low = None
    if low is not None and start < low:
        return (
            f"{where}: the range starts below the log start offset {low}; the records were "
            f"deleted (retention) before they were read ({reason})"
        )
    return f"{where}: offset {start} is out of the partition's range ({reason})"


def _merge_ranges(ranges: Iterable[OffsetRange]) -> dict[TP, tuple[int, int]]:
    wanted: dict[TP, tuple[int, int]] = {}
    for r in ranges:
        if r.end <= r.start:
            continue
        tp = (r.topic, r.partition)
        if tp in wanted:
            raise ValueError(f"two ranges for {r.topic}[{r.partition}]; merge them first")
        wanted[tp] = (r.start, r.end)
    return wanted
