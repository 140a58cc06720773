"""Reference model of word_count v2: plain per-record Python, no statekeeper runtime.

Contract semantics: v1's (a record whose value is None or not valid UTF-8 goes to the DLQ;
the words of a line are ``re.findall(r"[a-z0-9']+", line.lower())``), and per word the
``word-counts`` store holds ``{"count": n, "first_seen_ms": ts}``: ``n`` its occurrences,
``ts`` the smallest timestamp of the lines it occurs in.

After an upgrade (``upgraded_at``: per partition of the input, the first offset v2 read;
v1 read the records before it and its counts were migrated), a word that occurs in any line
v1 read has ``first_seen_ms`` None (v1 did not record it), whatever v2 read later.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from statekeeper.kafka.model import KafkaRecord
from statekeeper.recompute.grouping import RecordsInput, by_task

from ..word_count import reference as v1

Position = v1.Position


@dataclass
class WordCountV2Result:
    """Expected ``word-counts`` entries and dead-lettered records (in per-partition offset
    order)."""

    counts: dict[str, dict[str, Any]] = field(default_factory=dict)
    dlq: list[Position] = field(default_factory=list)
    dlq_reasons: dict[Position, str] = field(default_factory=dict)
    records: int = 0
    words: int = 0


def recompute(
    records: RecordsInput, *, upgraded_at: Mapping[int, int] | None = None
) -> WordCountV2Result:
    """Expected state for ``records`` of the ``lines`` topic (flat or ``{partition: [...]}``);
    ``upgraded_at``: see the module docstring (None: v2 read everything)."""
    result = WordCountV2Result()
    before: list[tuple[KafkaRecord, str]] = []  # v1's lines
    after: list[tuple[KafkaRecord, str]] = []  # v2's lines
    for _task, task_records in by_task(records):
        for record in task_records:
            result.records += 1
            line = _line(record, result)
            if line is None:
                continue
            upgrade = None if upgraded_at is None else upgraded_at.get(record.partition)
            (before if upgrade is not None and record.offset < upgrade else after).append(
                (record, line)
            )
    counts = result.counts
    for _record, line in before:
        for word in v1.words(line):
            entry = counts.setdefault(word, {"count": 0, "first_seen_ms": None})
            entry["count"] += 1
            result.words += 1
    for record, line in after:
        for word in v1.words(line):
            ts = record.timestamp_ms
            entry = counts.setdefault(word, {"count": 0, "first_seen_ms": ts})
            entry["count"] += 1
            if entry["first_seen_ms"] is not None and ts < entry["first_seen_ms"]:
                entry["first_seen_ms"] = ts
            result.words += 1
    return result


def _line(record: KafkaRecord, result: WordCountV2Result) -> str | None:
    """The record's text, or None after noting it as dead-lettered."""
    reason = None
    if record.value is None:
        reason = v1.DLQ_NULL_VALUE
    else:
        try:
            return record.value.decode("utf-8")
        except UnicodeDecodeError:
            reason = v1.DLQ_INVALID_UTF8
    position = (record.topic, record.partition, record.offset)
    result.dlq.append(position)
    result.dlq_reasons[position] = reason
    return None
