"""Log start and true log end offsets of many partitions, correct on every broker.

``ListOffsets(latest)`` (the high watermark) is not the log end on every broker: some report
the start of the last produce batch + 1. So the end is *read*, not asked for (invariant 5):
one consumer asks for all watermarks in one request, starts every partition at
``max(low, high - 1)`` — the first record of the last batch on such brokers, the last record
on Kafka — and reads to partition EOF with the shared
:class:`~statekeeper.kafka.partition_reader.PartitionReader`; the EOF offset is the log end.
On a broker whose watermark is right this reads at most one produce batch per partition.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException, TopicPartition

from statekeeper.errors import BrokerUnavailableError
from statekeeper.kafka.partition_reader import (
    MISSING_CODES,
    TP,
    PartitionMissingError,
    PartitionReader,
    assign_at,
    eof_consumer,
)

# consume() waits its whole timeout unless it fills num_messages; the end is a few records
# and an EOF event away, so poll briefly.
_POLL_TIMEOUT_S = 0.005


def log_start_offsets(
    consumer_conf: dict[str, Any], partitions: Iterable[TP], timeout_s: float = 10.0
) -> dict[TP, int]:
    """The first offset still in the log of each partition (one request for all)."""
    tps = _unique(partitions)
    if not tps:
        return {}
    consumer = eof_consumer(consumer_conf, "offsets")
    try:
        return watermarks(consumer, tps, timeout_s)[0]
    finally:
        consumer.close()


def log_end_offsets(
    consumer_conf: dict[str, Any], partitions: Iterable[TP], timeout_s: float = 10.0
) -> dict[TP, int]:
    """The true log end offset (offset of the next record) of each partition.

    Read to partition EOF from just before the reported high watermark, with one consumer
    for all partitions; see the module docstring. Repeated lookups: :class:`LogEndReader`.
    """
    tps = _unique(partitions)
    if not tps:
        return {}
    reader = LogEndReader(consumer_conf, timeout_s)
    try:
        return reader.read(tps)
    finally:
        reader.close()


class LogEndReader:
    """:func:`log_end_offsets` again and again on one consumer.

    A new consumer per lookup pays a connection and a metadata round trip each time; a
    streaming source asks before every micro-batch. A partition whose high watermark has not
    moved since this reader last read its end has the same end, so only the watermark is
    asked for (the read to EOF was ~90 % of a lookup): every append moves the watermark on
    every broker, to its end on Kafka and to the new last batch's start + 1 on brokers
    whose watermark trails. Not thread-safe; after an error the consumer is replaced on the
    next call.
    """

    def __init__(self, consumer_conf: dict[str, Any], timeout_s: float = 10.0) -> None:
        self.consumer_conf = consumer_conf
        self.timeout_s = timeout_s
        self._consumer: Consumer | None = None
        #: partition -> (high watermark, end) as last read
        self._known: dict[TP, tuple[int, int]] = {}

    def read(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """The log end offset of each of ``partitions``."""
        tps = _unique(partitions)
        if not tps:
            return {}
        if self._consumer is None:
            # A start already deleted by retention jumps to the end: only the end counts.
            self._consumer = eof_consumer(
                self.consumer_conf, "offsets", **{"auto.offset.reset": "latest"}
            )
        consumer = self._consumer
        try:
            highs = _list_offsets(consumer, tps, OFFSET_END, self.timeout_s)
            ends = {
                tp: known[1]
                for tp in tps
                if (known := self._known.get(tp)) is not None and known[0] == highs[tp]
            }
            moved = [tp for tp in tps if tp not in ends]
            if moved:
                starts = {tp: max(0, highs[tp] - 1) for tp in moved}
                assign_at(consumer, starts)
                reader = PartitionReader(
                    consumer,
                    starts,
                    size_hints={tp: highs[tp] for tp in moved},
                    timeout_s=self.timeout_s,
                    poll_timeout_s=_POLL_TIMEOUT_S,
                )
                positions = reader.drain()
                # The next read assigns afresh; no partition may stay paused from this one.
                consumer.resume([TopicPartition(t, p) for t, p in moved])
                consumer.unassign()
                for tp in moved:
                    ends[tp] = positions[tp]
                    self._known[tp] = (highs[tp], positions[tp])
            return {tp: ends[tp] for tp in tps}
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Close the consumer (the next :meth:`read` opens a new one and reads every end)."""
        self._known.clear()
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()


def watermarks(
    consumer: Consumer, tps: list[TP], timeout_s: float
) -> tuple[dict[TP, int], dict[TP, int]]:
    """(low, high) watermarks of ``tps``, one ListOffsets round trip each.

    ``offsets_for_times`` with the protocol's special timestamps -2 (earliest) and -1
    (latest) batches all partitions per broker, unlike ``get_watermark_offsets``. The high
    watermark may trail the log end (see the module docstring): use it as a size hint or a
    lower bound, never as the end. A missing partition raises
    :class:`~statekeeper.kafka.partition_reader.PartitionMissingError`.
    """
    return _list_offsets(consumer, tps, OFFSET_BEGINNING, timeout_s), _list_offsets(
        consumer, tps, OFFSET_END, timeout_s
    )


def _list_offsets(consumer: Consumer, tps: list[TP], which: int, timeout_s: float) -> dict[TP, int]:
    query = [TopicPartition(t, p, which) for t, p in tps]
    label = "earliest" if which == OFFSET_BEGINNING else "latest"
    try:
        answered = consumer.offsets_for_times(query, timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        code = error.code() if hasattr(error, "code") else None
        if code in MISSING_CODES:
            raise PartitionMissingError(
                f"cannot list {label} offsets: a partition of {_describe(tps)} does not exist "
                f"({exc})",
                tps[0],
                str(exc),
            ) from exc
        raise BrokerUnavailableError(
            f"cannot list {label} offsets of {_describe(tps)} within {timeout_s:g} s: {exc}"
        ) from exc
    result: dict[TP, int] = {}
    for tp in answered:
        key = (tp.topic, tp.partition)
        if tp.error is not None:
            if tp.error.code() in MISSING_CODES:
                raise PartitionMissingError(
                    f"{_describe([key])} does not exist: {tp.error.str()}", key, tp.error.str()
                )
            raise BrokerUnavailableError(
                f"cannot list {label} offset of {_describe([key])}: {tp.error.str()}"
            )
        if tp.offset < 0:
            # An empty log answers -1 on some brokers: start and end are both 0 then.
            result[key] = 0
        else:
            result[key] = tp.offset
    return result


def _unique(partitions: Iterable[TP]) -> list[TP]:
    return sorted({(str(t), int(p)) for t, p in partitions})


def _describe(tps: list[TP]) -> str:
    shown = ", ".join(f"{t}[{p}]" for t, p in tps[:8])
    more = f" and {len(tps) - 8} more" if len(tps) > 8 else ""
    return f"partition(s) {shown}{more}"
