"""Reference model of the word_count app: plain per-record Python, no statekeeper runtime.

Contract semantics: a record whose value is None or not valid UTF-8 goes to the DLQ;
otherwise ``re.findall(r"[a-z0-9']+", line.lower())`` gives the words, each counted once
per occurrence. The final count per word is what the ``word-counts`` store holds and the
latest value per key in the ``word-counts`` output topic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from statekeeper.recompute.grouping import RecordsInput, by_task

WORD_PATTERN = re.compile(r"[a-z0-9']+")

DLQ_NULL_VALUE = "null_value"
DLQ_INVALID_UTF8 = "invalid_utf8"

Position = tuple[str, int, int]  # topic, partition, offset


@dataclass
class WordCountResult:
    """Expected word counts and dead-lettered records (in per-partition offset order)."""

    counts: dict[str, int] = field(default_factory=dict)
    dlq: list[Position] = field(default_factory=list)
    dlq_reasons: dict[Position, str] = field(default_factory=dict)
    records: int = 0
    words: int = 0


def words(line: str) -> list[str]:
    """The words of one line, as the app splits them."""
    return WORD_PATTERN.findall(line.lower())


def recompute(records: RecordsInput) -> WordCountResult:
    """Expected counts for ``records`` of the ``lines`` topic (flat or ``{partition: [...]}``)."""
    result = WordCountResult()
    counts = result.counts
    for _task, task_records in by_task(records):
        for record in task_records:
            result.records += 1
            reason = None
            if record.value is None:
                reason = DLQ_NULL_VALUE
            else:
                try:
                    line = record.value.decode("utf-8")
                except UnicodeDecodeError:
                    reason = DLQ_INVALID_UTF8
            if reason is not None:
                position = (record.topic, record.partition, record.offset)
                result.dlq.append(position)
                result.dlq_reasons[position] = reason
                continue
            for word in words(line):
                counts[word] = counts.get(word, 0) + 1
                result.words += 1
    return result
