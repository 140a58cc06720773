"""The read-to-end loop's bookkeeping, fed scripted consume() results (no broker needed).

The real-broker behaviour is in tests/integration/test_partition_reader.py; this covers the
orderings a broker produces only by chance: an EOF in the middle of a chunk, a stale EOF,
records past an end in the same chunk, interleaved partitions.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Message, TopicPartition

from statekeeper.kafka.partition_reader import (
    POLL_TIMEOUT_S,
    STALE_HINT_POLL_S,
    NullKeyError,
    OffsetOutOfRangeError,
    PartitionFetchError,
    PartitionMissingError,
    PartitionReader,
    ReadStalledError,
)


def rec(partition: int, offset: int, key: bytes | None = b"k", topic: str = "t") -> Message:
    return Message(topic=topic, partition=partition, offset=offset, key=key, value=b"v")


def event(partition: int, offset: int, code: int, topic: str = "t") -> Message:
    return Message(topic=topic, partition=partition, offset=offset, error=KafkaError(code))


def eof(partition: int, offset: int, topic: str = "t") -> Message:
    return event(partition, offset, KafkaError._PARTITION_EOF, topic)


class ScriptedConsumer:
    """Hands out prepared chunks; records what the reader asked for and paused."""

    def __init__(self, chunks: Iterable[list[Message]]) -> None:
        self.chunks = list(chunks)
        self.asked: list[int] = []
        self.timeouts: list[float] = []
        self.paused: list[tuple[str, int]] = []

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        self.asked.append(num_messages)
        self.timeouts.append(timeout)
        return self.chunks.pop(0) if self.chunks else []

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused += [(tp.topic, tp.partition) for tp in partitions]


def read(consumer: ScriptedConsumer, starts: dict[Any, int], **kwargs: Any) -> PartitionReader:
    return PartitionReader(consumer, starts, **{"timeout_s": 0.2, **kwargs})  # type: ignore[arg-type]


def offsets(reader: PartitionReader) -> dict[Any, list[int]]:
    got: dict[Any, list[int]] = {}
    for tp, messages, _ in reader:
        got.setdefault(tp, []).extend(m.offset() for m in messages)
    return got


def test_records_of_a_chunk_split_into_runs_and_eof_ends_each_partition():
    consumer = ScriptedConsumer(
        [
            [rec(0, 0), rec(0, 1), rec(1, 7), rec(0, 2), eof(1, 8)],
            [rec(0, 3), eof(0, 4), rec(1, 8)],  # partition 1 is done: its record is dropped
        ]
    )
    reader = read(consumer, {("t", 0): 0, ("t", 1): 7})
    runs = [(tp, [m.offset() for m in msgs]) for tp, msgs, _ in reader]
    assert runs == [(("t", 0), [0, 1]), (("t", 1), [7]), (("t", 0), [2]), (("t", 0), [3])]
    assert reader.positions == {("t", 0): 4, ("t", 1): 8}
    assert reader.overshot == {("t", 1)}
    assert consumer.paused == [("t", 1), ("t", 0)]


def test_consume_asks_for_what_is_left():
    # Partition 0 to EOF with a size hint, partition 1 up to an end offset.
    consumer = ScriptedConsumer([[rec(0, 10), rec(1, 0)], [], [eof(0, 11), rec(1, 1)]])
    reader = read(
        consumer, {("t", 0): 10, ("t", 1): 0}, ends={("t", 1): 2}, size_hints={("t", 0): 11}
    )
    assert offsets(reader) == {("t", 0): [10], ("t", 1): [0, 1]}
    # (11 - 10 + 1 for the EOF) + (2 - 0); then (0 + 1) + (2 - 1), twice.
    assert consumer.asked == [4, 2, 2]
    # Without a hint a partition read to EOF asks for a whole chunk.
    consumer = ScriptedConsumer([[eof(0, 0)]])
    read(consumer, {("t", 0): 0}, chunk_size=123).drain()
    assert consumer.asked == [123]


def test_past_a_stale_hint_it_takes_what_is_queued_without_waiting():
    """A trailing high watermark (start of the last produce batch + 1) as the hint: once the
    read passes it, the rest of the batch is asked for at once, not a record per call."""
    consumer = ScriptedConsumer([[rec(0, 0), rec(0, 1)], [rec(0, 2), rec(0, 3)], [], [eof(0, 4)]])
    reader = read(consumer, {("t", 0): 0}, size_hints={("t", 0): 1}, chunk_size=500)
    assert offsets(reader) == {("t", 0): [0, 1, 2, 3]} and reader.positions == {("t", 0): 4}
    assert consumer.asked == [2, 500, 500, 500]
    assert consumer.timeouts == [POLL_TIMEOUT_S, 0.0, 0.0, STALE_HINT_POLL_S]


def test_an_end_offset_trims_the_run_and_an_eof_below_it_is_stale_only_if_ends_exist():
    consumer = ScriptedConsumer([[rec(0, 5), rec(0, 6), rec(0, 7), rec(0, 8)]])
    reader = read(consumer, {("t", 0): 5}, ends={("t", 0): 7})
    assert offsets(reader) == {("t", 0): [5, 6]}
    assert reader.overshot == {("t", 0)} and reader.positions == {("t", 0): 7}

    chunks = [[rec(0, 5), eof(0, 6)], [rec(0, 6)]]
    reader = read(ScriptedConsumer(chunks), {("t", 0): 5}, ends={("t", 0): 7})
    assert offsets(reader) == {("t", 0): [5]}  # the partition ended first
    reader = read(ScriptedConsumer(chunks), {("t", 0): 5}, ends={("t", 0): 7}, ends_exist=True)
    assert offsets(reader) == {("t", 0): [5, 6]}  # a stale EOF: the record came after it

    # A range that closes on an offset gap (a transaction marker) ends at EOF past its end.
    chunks = [[rec(0, 5), eof(0, 7)]]
    reader = read(ScriptedConsumer(chunks), {("t", 0): 5}, ends={("t", 0): 7}, ends_exist=True)
    assert offsets(reader) == {("t", 0): [5]} and not reader.pending


def test_a_keyed_read_takes_events_from_the_key_column():
    consumer = ScriptedConsumer([[rec(0, 0, b"a"), rec(0, 1, b"b"), eof(0, 2), rec(0, 2, b"c")]])
    runs = list(read(consumer, {("t", 0): 0}, keyed=True))
    assert [(tp, keys) for tp, _, keys in runs] == [(("t", 0), [b"a", b"b", b"c"])]
    assert [m.offset() for m in runs[0].messages] == [0, 1, 2]

    consumer = ScriptedConsumer([[rec(0, 0), rec(0, 1, None), eof(0, 2)]])
    with pytest.raises(NullKeyError, match=r"t\[0\] offset 1"):
        list(read(consumer, {("t", 0): 0}, keyed=True))


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (KafkaError.UNKNOWN_TOPIC_OR_PART, PartitionMissingError),
        (KafkaError._UNKNOWN_PARTITION, PartitionMissingError),
        (KafkaError.OFFSET_OUT_OF_RANGE, OffsetOutOfRangeError),
        (KafkaError._AUTO_OFFSET_RESET, OffsetOutOfRangeError),
        (KafkaError._TRANSPORT, PartitionFetchError),
    ],
)
def test_error_events_raise_what_they_mean(code: int, error: type[Exception]):
    consumer = ScriptedConsumer([[event(0, 3, code)]])
    with pytest.raises(error, match=r"t\[0\]") as info:
        list(read(consumer, {("t", 0): 3}))
    assert info.value.tp == ("t", 0)  # type: ignore[attr-defined]


def test_no_answer_within_the_timeout_stalls_with_the_positions():
    consumer = ScriptedConsumer([[rec(0, 0), rec(1, 4)]])
    reader = read(consumer, {("t", 0): 0, ("t", 1): 4, ("t", 2): 9}, ends={("t", 1): 5})
    with pytest.raises(ReadStalledError) as info:
        reader.drain()
    assert info.value.pending == [("t", 0), ("t", 2)]
    assert info.value.positions == {("t", 0): 1, ("t", 1): 5, ("t", 2): 9}
    assert "t[0] (at offset 1), t[2] (at offset 9)" in str(info.value)
