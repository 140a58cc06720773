"""Log start and true log end offsets of many partitions, correct on every broker.

``ListOffsets(latest)`` (the high watermark) is not the log end on every broker: some report
the start of the last produce batch + 1. So the end is *read*, not asked for (invariant 5):
one consumer asks for all watermarks in one request, starts every partition at
``max(low, high - 1)`` — the first record of the last batch on such brokers, the last record
on Kafka — and consumes to the partition-EOF event, whose offset is the log end. On a broker
whose watermark is right this reads at most one record per partition.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    TopicPartition,
)

from statekeeper.errors import BrokerUnavailableError, StatekeeperError

TP = tuple[str, int]

# consume() waits its whole timeout unless it fills num_messages; the end is a few records
# and an EOF event away, so poll briefly.
_POLL_TIMEOUT_S = 0.005
_CONSUME_CHUNK = 20_000
_MISSING = (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION)


def eof_consumer(consumer_conf: dict[str, Any], **overrides: Any) -> Consumer:
    """A consumer that reports partition EOF promptly and never commits or joins a group."""
    config = dict(consumer_conf)
    config.update(
        {
            "group.id": f"statekeeper-offsets-{uuid.uuid4().hex[:12]}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            # Don't let the broker park an empty fetch: EOF is what the caller waits for.
            "fetch.wait.max.ms": 10,
        }
    )
    config.update(overrides)
    return Consumer(config)


def log_start_offsets(
    consumer_conf: dict[str, Any], partitions: Iterable[TP], timeout_s: float = 10.0
) -> dict[TP, int]:
    """The first offset still in the log of each partition (one request for all)."""
    tps = _unique(partitions)
    if not tps:
        return {}
    consumer = eof_consumer(consumer_conf)
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
    streaming source asks before every micro-batch. Not thread-safe; after an error the
    consumer is replaced on the next call.
    """

    def __init__(self, consumer_conf: dict[str, Any], timeout_s: float = 10.0) -> None:
        self.consumer_conf = consumer_conf
        self.timeout_s = timeout_s
        self._consumer: Consumer | None = None

    def read(self, partitions: Iterable[TP]) -> dict[TP, int]:
        tps = _unique(partitions)
        if not tps:
            return {}
        if self._consumer is None:
            self._consumer = eof_consumer(self.consumer_conf, **{"auto.offset.reset": "latest"})
        consumer = self._consumer
        try:
            lows, highs = watermarks(consumer, tps, self.timeout_s)
            starts = {tp: max(lows[tp], highs[tp] - 1) for tp in tps}
            ends = read_to_eof_positions(consumer, starts, self.timeout_s, highs)
            # The next read assigns afresh; no partition may stay paused from this one.
            consumer.resume([TopicPartition(t, p) for t, p in tps])
            consumer.unassign()
            return ends
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()


def watermarks(
    consumer: Consumer, tps: list[TP], timeout_s: float
) -> tuple[dict[TP, int], dict[TP, int]]:
    """(low, high) watermarks of ``tps``, one ListOffsets round trip each.

    ``offsets_for_times`` with the protocol's special timestamps -2 (earliest) and -1
    (latest) batches all partitions per broker, unlike ``get_watermark_offsets``.
    """
    return _list_offsets(consumer, tps, OFFSET_BEGINNING, timeout_s), _list_offsets(
        consumer, tps, OFFSET_END, timeout_s
    )


def read_to_eof_positions(
    consumer: Consumer,
    starts: dict[TP, int],
    timeout_s: float,
    expected_ends: dict[TP, int] | None = None,
) -> dict[TP, int]:
    """Assign ``starts``, consume everything to partition EOF, return each EOF position.

    ``expected_ends`` (e.g. high watermarks) only size each ``consume()`` call, which
    otherwise waits out its timeout for a full chunk; a wrong guess costs another round.
    """
    consumer.assign([TopicPartition(t, p, off) for (t, p), off in starts.items()])
    ends: dict[TP, int] = {}
    seen_end = dict(starts)  # last record offset + 1, a lower bound of the end
    deadline = time.monotonic() + timeout_s
    while len(ends) < len(starts):
        wanted = _CONSUME_CHUNK
        if expected_ends is not None:  # the records left plus one EOF event per partition
            wanted = sum(
                max(0, expected_ends.get(tp, 0) - seen_end[tp]) + 1
                for tp in starts
                if tp not in ends
            )
        msgs = consumer.consume(min(wanted, _CONSUME_CHUNK), _POLL_TIMEOUT_S)
        if not msgs:
            if time.monotonic() > deadline:
                missing = sorted(set(starts) - set(ends))
                raise BrokerUnavailableError(
                    f"no end-of-partition within {timeout_s:g} s for "
                    f"{_describe(missing)} (broker unreachable or overloaded?)"
                )
            continue
        deadline = time.monotonic() + timeout_s
        for msg in msgs:
            err = msg.error()
            tp = (msg.topic(), msg.partition())
            if err is None:
                off = msg.offset() + 1
                if off > seen_end.get(tp, 0):
                    seen_end[tp] = off
                continue
            if err.code() == KafkaError._PARTITION_EOF:
                ends[tp] = max(msg.offset(), seen_end.get(tp, 0))
                consumer.pause([TopicPartition(tp[0], tp[1])])
            elif err.code() in _MISSING:
                raise StatekeeperError(f"{_describe([tp])} does not exist: {err.str()}")
            else:
                raise BrokerUnavailableError(
                    f"reading to the end of {_describe([tp])}: {err.str()}"
                )
    return ends


def _list_offsets(consumer: Consumer, tps: list[TP], which: int, timeout_s: float) -> dict[TP, int]:
    query = [TopicPartition(t, p, which) for t, p in tps]
    label = "earliest" if which == OFFSET_BEGINNING else "latest"
    try:
        answered = consumer.offsets_for_times(query, timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else exc
        code = error.code() if hasattr(error, "code") else None
        if code in _MISSING:
            raise StatekeeperError(
                f"cannot list {label} offsets: a partition of {_describe(tps)} does not exist "
                f"({exc})"
            ) from exc
        raise BrokerUnavailableError(
            f"cannot list {label} offsets of {_describe(tps)} within {timeout_s:g} s: {exc}"
        ) from exc
    result: dict[TP, int] = {}
    for tp in answered:
        key = (tp.topic, tp.partition)
        if tp.error is not None:
            if tp.error.code() in _MISSING:
                raise StatekeeperError(f"{_describe([key])} does not exist: {tp.error.str()}")
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
