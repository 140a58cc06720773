"""One partition's consumed records, held as the consumer returned them and read as columns.

Building a :class:`KafkaRecord` per message costs more than consuming it. A batch operator
that only needs keys (a count) or keys and values reads whole columns instead
(:func:`key_column`, ...); records are built only for the rows somebody indexes (a DLQ entry,
an emitted row's source) or iterates (record-at-a-time processing).
The column functions accept plain record lists too, so callers need not care which they got.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from operator import attrgetter, itemgetter, methodcaller
from typing import Any, overload

from confluent_kafka import Message

from statekeeper.kafka.model import KafkaRecord

_key = methodcaller("key")
_value = methodcaller("value")
_timestamp = methodcaller("timestamp")
_offset = methodcaller("offset")
_KEY = attrgetter("key")
_VALUE = attrgetter("value")
_TS = attrgetter("timestamp_ms")
_second = itemgetter(1)


class ConsumedRun(Sequence[KafkaRecord]):
    """Messages of one topic-partition in offset order; a read-only sequence of records."""

    __slots__ = ("topic", "partition", "messages")

    def __init__(self, topic: str, partition: int, messages: list[Message]) -> None:
        self.topic = topic
        self.partition = partition
        self.messages = messages

    def __len__(self) -> int:
        return len(self.messages)

    @overload
    def __getitem__(self, index: int) -> KafkaRecord: ...

    @overload
    def __getitem__(self, index: slice) -> ConsumedRun: ...

    def __getitem__(self, index: int | slice) -> KafkaRecord | ConsumedRun:
        if isinstance(index, slice):
            return ConsumedRun(self.topic, self.partition, self.messages[index])
        return _record(self.topic, self.partition, self.messages[index])

    def __iter__(self) -> Iterator[KafkaRecord]:
        return iter(to_records(self.topic, self.partition, self.messages))

    def __repr__(self) -> str:
        return f"ConsumedRun({self.topic}[{self.partition}], {len(self.messages)} records)"


def to_records(topic: str, partition: int, msgs: list[Message]) -> list[KafkaRecord]:
    """A run of one partition's messages as :class:`KafkaRecord` s, built column by column."""
    headers = [tuple(h) if h else () for h in map(methodcaller("headers"), msgs)]
    return list(
        map(
            KafkaRecord,
            [topic] * len(msgs),
            [partition] * len(msgs),
            map(_offset, msgs),
            _timestamps(msgs),
            map(_key, msgs),
            map(_value, msgs),
            headers,
        )
    )


def key_column(records: Sequence[KafkaRecord]) -> list[bytes | None]:
    if isinstance(records, ConsumedRun):
        return list(map(_key, records.messages))
    return list(map(_KEY, records))


def value_column(records: Sequence[KafkaRecord]) -> list[bytes | None]:
    if isinstance(records, ConsumedRun):
        return list(map(_value, records.messages))
    return list(map(_VALUE, records))


def timestamp_column(records: Sequence[KafkaRecord]) -> list[int]:
    if isinstance(records, ConsumedRun):
        return _timestamps(records.messages)
    return list(map(_TS, records))


def max_timestamp(records: Sequence[KafkaRecord]) -> int:
    """The largest record timestamp (-1 when empty), without building a column."""
    if not records:
        return -1
    if isinstance(records, ConsumedRun):
        return max(map(_second, map(_timestamp, records.messages)))
    return max(map(_TS, records))


def _timestamps(msgs: list[Message]) -> list[int]:
    return [ts for _, ts in map(_timestamp, msgs)]


def _record(topic: str, partition: int, msg: Any) -> KafkaRecord:
    headers = msg.headers()
    return KafkaRecord(
        topic,
        partition,
        msg.offset(),
        msg.timestamp()[1],
        msg.key(),
        msg.value(),
        tuple(headers) if headers else (),
    )


#: Records per partition :func:`sampled_payload_bytes` looks at.
PAYLOAD_SAMPLE = 32


def sampled_payload_bytes(runs: dict[str, Sequence[KafkaRecord]]) -> float | None:
    """The mean key + value bytes of the first :data:`PAYLOAD_SAMPLE` records of each run
    (None without records): what a batch's records weigh, for bounding batch sizes."""
    total = count = 0
    for records in runs.values():
        if isinstance(records, ConsumedRun):
            head = records.messages[:PAYLOAD_SAMPLE]
            keys, values = map(_key, head), map(_value, head)
        else:
            head = list(records[:PAYLOAD_SAMPLE])
            keys, values = map(_KEY, head), map(_VALUE, head)
        total += sum(len(k) for k in keys if k) + sum(len(v) for v in values if v)
        count += len(head)
    return total / count if count else None
