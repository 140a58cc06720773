"""``--from TIMESTAMP_MS``: per partition, the first offset whose record's timestamp is at or
after the timestamp (Kafka's ``ListOffsets`` by time), checked against the records.

The broker is asked first (``offsets_for_times``); its answer is accepted when the records
around it agree (the record at the answer is at or after the timestamp, the one before it
is earlier). A broker whose answer does not hold (the embedded broker answers 0 for every
timestamp, docs/brokers.md) costs a scan: the partition is read from its log start until
the first record at or after the timestamp. No record at or after it: the log end.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from statekeeper.errors import BrokerUnavailableError
from statekeeper.kafka.model import KafkaRecord, OffsetRange
from statekeeper.kafka.range_reader import iter_range_chunks

TP = tuple[str, int]


def offsets_for_timestamp(
    consumer_conf: dict[str, Any],
    timestamp_ms: int,
    starts: Mapping[TP, int],
    ends: Mapping[TP, int],
    timeout_s: float = 30.0,
) -> dict[TP, int]:
    """The first offset at or after ``timestamp_ms`` of every partition of ``starts`` (its
    log start) and ``ends`` (its log end)."""
    answered = _ask_broker(consumer_conf, timestamp_ms, sorted(starts), ends, timeout_s)
    checked = _check_answers(consumer_conf, timestamp_ms, answered, starts, ends, timeout_s)
    wrong = sorted(tp for tp in starts if tp not in checked)
    if wrong:
        checked.update(_scan(consumer_conf, timestamp_ms, wrong, starts, ends, timeout_s))
    return checked


def _ask_broker(
    consumer_conf: dict[str, Any],
    timestamp_ms: int,
    tps: list[TP],
    ends: Mapping[TP, int],
    timeout_s: float,
) -> dict[TP, int]:
    conf = {**consumer_conf, "group.id": "statekeeper-backfill-times", "enable.auto.commit": False}
    consumer = Consumer(conf)
    try:
        query = [TopicPartition(t, p, timestamp_ms) for t, p in tps]
        answer = consumer.offsets_for_times(query, timeout=timeout_s)
    except KafkaException as exc:
        raise BrokerUnavailableError(
            f"--from {timestamp_ms}: cannot list offsets by time: {exc}"
        ) from exc
    finally:
        consumer.close()
    out: dict[TP, int] = {}
    for tp in answer:
        key = (tp.topic, tp.partition)
        if tp.error is None:
            # -1: no record at or after the timestamp, so the log end.
            out[key] = ends[key] if tp.offset < 0 else tp.offset
    return out


def _check_answers(
    consumer_conf: dict[str, Any],
    timestamp_ms: int,
    answered: Mapping[TP, int],
    starts: Mapping[TP, int],
    ends: Mapping[TP, int],
    timeout_s: float,
) -> dict[TP, int]:
    """The answers the records around them confirm."""
    plausible = {tp: o for tp, o in answered.items() if starts[tp] <= o <= ends[tp]}
    ranges = [
        OffsetRange(t, p, max(starts[(t, p)], o - 1), min(ends[(t, p)], o + 1))
        for (t, p), o in sorted(plausible.items())
    ]
    seen: dict[TP, dict[int, int]] = {tp: {} for tp in plausible}
    for chunk in iter_range_chunks(consumer_conf, [r for r in ranges if r.count], timeout_s):
        for record in chunk:
            seen[(record.topic, record.partition)][record.offset] = record.timestamp_ms
    confirmed: dict[TP, int] = {}
    for tp, offset in plausible.items():
        stamps = seen[tp]
        at_ok = offset == ends[tp] or stamps.get(offset, -1) >= timestamp_ms
        before = stamps.get(offset - 1)
        before_ok = offset == starts[tp] or (before is not None and before < timestamp_ms)
        if at_ok and before_ok:
            confirmed[tp] = offset
    return confirmed


def _scan(
    consumer_conf: dict[str, Any],
    timestamp_ms: int,
    tps: list[TP],
    starts: Mapping[TP, int],
    ends: Mapping[TP, int],
    timeout_s: float,
) -> dict[TP, int]:
    """Read each partition from its log start to its first record at or after the
    timestamp (the log end when there is none)."""
    found = {tp: ends[tp] for tp in tps}
    pending = {tp for tp in tps if ends[tp] > starts[tp]}
    ranges = [OffsetRange(t, p, starts[(t, p)], ends[(t, p)]) for t, p in sorted(pending)]
    chunks = iter_range_chunks(consumer_conf, ranges, timeout_s)
    try:
        for chunk in chunks:
            first = _first_at_or_after(chunk, timestamp_ms)
            if first is not None and (first.topic, first.partition) in pending:
                tp = (first.topic, first.partition)
                found[tp] = first.offset
                pending.discard(tp)
                if not pending:
                    break
    finally:
        chunks.close()  # type: ignore[attr-defined]
    return found


def _first_at_or_after(chunk: list[KafkaRecord], timestamp_ms: int) -> KafkaRecord | None:
    return next((r for r in chunk if r.timestamp_ms >= timestamp_ms), None)
