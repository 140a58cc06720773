"""``--from TIMESTAMP_MS``: the broker's answer is kept when the records around it agree,
else the partition is scanned (the broker and the reads are faked: a log in memory)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from statekeeper.backfill import timestamps
from statekeeper.kafka.model import KafkaRecord, OffsetRange

# Partition 0: offsets 0..9 at 100, 110, ..., 190; partition 1: offsets 3..6 (log start 3).
LOG = {
    ("t", 0): [(o, 100 + 10 * o) for o in range(10)],
    ("t", 1): [(o, 100 + 10 * o) for o in range(3, 7)],
}
STARTS = {("t", 0): 0, ("t", 1): 3}
ENDS = {("t", 0): 10, ("t", 1): 7}


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[list[OffsetRange]]:
    seen: list[list[OffsetRange]] = []

    def chunks(conf: Any, ranges: Any, timeout_s: float = 30.0) -> Iterator[list[KafkaRecord]]:
        ranges = list(ranges)
        seen.append(ranges)
        for r in ranges:
            yield [
                KafkaRecord(r.topic, r.partition, o, ts, None, b"x")
                for o, ts in LOG[(r.topic, r.partition)]
                if r.start <= o < r.end
            ]

    monkeypatch.setattr(timestamps, "iter_range_chunks", chunks)
    return seen


def _broker(monkeypatch: pytest.MonkeyPatch, answers: dict) -> None:
    monkeypatch.setattr(timestamps, "_ask_broker", lambda *args: dict(answers))


def test_a_right_answer_is_checked_and_kept(monkeypatch, reads) -> None:
    _broker(monkeypatch, {("t", 0): 5, ("t", 1): 5})  # 150 is at offset 5 in both
    assert timestamps.offsets_for_timestamp({}, 150, STARTS, ENDS) == {("t", 0): 5, ("t", 1): 5}
    # One read of the records around the answers, no scan.
    assert reads == [[OffsetRange("t", 0, 4, 6), OffsetRange("t", 1, 4, 6)]]
    # No record at or after the timestamp in p1: the log end, checked against its last record.
    reads.clear()
    _broker(monkeypatch, {("t", 0): 9, ("t", 1): 7})
    assert timestamps.offsets_for_timestamp({}, 190, STARTS, ENDS) == {("t", 0): 9, ("t", 1): 7}
    assert len(reads) == 1


def test_a_wrong_answer_is_replaced_by_a_scan(monkeypatch, reads) -> None:
    _broker(monkeypatch, {("t", 0): 0, ("t", 1): 3})  # the embedded broker's answer
    assert timestamps.offsets_for_timestamp({}, 145, STARTS, ENDS) == {("t", 0): 5, ("t", 1): 5}
    assert reads[-1] == [OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 3, 7)]
    # Before every record: the log start, which the broker's 0 already was (no scan).
    reads.clear()
    assert timestamps.offsets_for_timestamp({}, 5, STARTS, ENDS) == {("t", 0): 0, ("t", 1): 3}
    assert len(reads) == 1
    # After every record: the log end.
    assert timestamps.offsets_for_timestamp({}, 999, STARTS, ENDS) == ENDS


def test_an_answer_outside_the_log_or_missing_is_scanned(monkeypatch, reads) -> None:
    _broker(monkeypatch, {("t", 0): 42})
    assert timestamps.offsets_for_timestamp({}, 160, STARTS, ENDS) == {("t", 0): 6, ("t", 1): 6}
