"""Exactly-once application of repartition records.

An upstream task that crashed after emitting part of a batch re-emits an identical prefix
when the batch is retried (same seq numbers, DESIGN.md invariant 2). Per repartition topic
and upstream task, the downstream task keeps the last applied ``(batch, seq)`` in its
task-state store (committed with the data) and skips every record at or below it.
"""

from __future__ import annotations

from collections.abc import Iterable

from statekeeper.kafka.model import KafkaRecord
from statekeeper.processing.output_headers import BATCH, SEQ, TASK, dedupe_id


class RepartitionDedupe:
    """Filters duplicate repartition records; ``positions`` is the persisted state
    (``"<topic>|<upstream task>" -> (batch, seq)``) and is updated in place."""

    def __init__(self, positions: dict[str, tuple[int, int]]) -> None:
        self.positions = positions

    def filter(self, topic: str, records: Iterable[KafkaRecord]) -> tuple[list[KafkaRecord], int]:
        """Records of ``topic`` to apply (in order) and the number of duplicates skipped."""
        prefix = topic + "|"
        last: dict[bytes, tuple[int, int]] = {}
        for key, pos in self.positions.items():
            if key.startswith(prefix):
                last[key[len(prefix) :].encode()] = pos
        kept: list[KafkaRecord] = []
        append = kept.append
        duplicates = 0
        batch_ints: dict[bytes, int] = {}
        for record in records:
            h = record.headers
            if len(h) >= 4 and h[1][0] == TASK and h[2][0] == BATCH and h[3][0] == SEQ:
                task, raw_batch = h[1][1], h[2][1]
                batch = batch_ints.get(raw_batch)  # type: ignore[arg-type]
                if batch is None:
                    batch = batch_ints[raw_batch] = int(raw_batch)  # type: ignore[arg-type]
                pos = (batch, int(h[3][1]))  # type: ignore[arg-type]
            else:
                found = dedupe_id(h)
                if found is None:  # not written by a statekeeper task: nothing to dedupe
                    append(record)
                    continue
                task, pos = found[0], (found[1], found[2])
            prev = last.get(task)  # type: ignore[arg-type]
            if prev is not None and pos <= prev:
                duplicates += 1
                continue
            last[task] = pos  # type: ignore[index]
            append(record)
        for task, pos in last.items():
            self.positions[prefix + task.decode()] = pos
        return kept, duplicates
