"""Exactly-once application of repartition records.

An upstream task that crashed after emitting part of a batch re-emits an identical prefix
when the batch is retried (same seq numbers, docs/fencing.md). Per repartition topic and
upstream task, the downstream task keeps the last applied ``(batch, seq)`` and the newest
upstream epoch in its task-state store (committed with the data) and skips every record at
or below that position, and every record of an older epoch (a frozen upstream writer that
resumed after its task moved: fenced, and counted).
"""

from __future__ import annotations

from collections.abc import Iterable

from statekeeper.kafka.model import KafkaRecord
from statekeeper.processing.output_headers import BATCH, EPOCH, SEQ, TASK, dedupe_id, record_epoch


class RepartitionDedupe:
    """Filters duplicate and fenced repartition records; ``positions`` is the persisted state
    (``"<topic>|<upstream task>" -> (batch, seq, epoch)``) and is updated in place;
    :attr:`fenced` counts records dropped for a stale epoch."""

    def __init__(self, positions: dict[str, tuple[int, int, int]]) -> None:
        self.positions = positions
        self.fenced = 0

    def filter(self, topic: str, records: Iterable[KafkaRecord]) -> tuple[list[KafkaRecord], int]:
        """Records of ``topic`` to apply (in order) and the number of duplicates skipped
        (fenced records are counted in :attr:`fenced`, not there)."""
        prefix = topic + "|"
        last: dict[bytes, tuple[int, int]] = {}
        epochs: dict[bytes, int] = {}
        for key, (batch, seq, epoch) in self.positions.items():
            if key.startswith(prefix):
                task = key[len(prefix) :].encode()
                last[task] = (batch, seq)
                epochs[task] = epoch
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
                epoch = int(h[5][1]) if len(h) > 5 and h[5][0] == EPOCH else record_epoch(h)  # type: ignore[arg-type]
            else:
                found = dedupe_id(h)
                if found is None:  # not written by a statekeeper task: nothing to dedupe
                    append(record)
                    continue
                task, pos = found[0], (found[1], found[2])
                epoch = record_epoch(h)
            newest = epochs.get(task, 0)  # type: ignore[arg-type]
            if 0 < epoch < newest:  # epoch 0: written without fencing, never fenced
                self.fenced += 1
                continue
            if epoch > newest:
                epochs[task] = epoch  # type: ignore[index]
            prev = last.get(task)  # type: ignore[arg-type]
            if prev is not None and pos <= prev:
                duplicates += 1
                continue
            last[task] = pos  # type: ignore[index]
            append(record)
        for task, (batch, seq) in last.items():
            self.positions[prefix + task.decode()] = (batch, seq, epochs.get(task, 0))
        return kept, duplicates


def scoped_topic(topic: str, partition: int) -> str:
    """The dedupe name of one partition of ``topic`` (``topic[3]``; ``[`` is not legal in a
    topic name): a task reading several partitions of a topic, each filtered from another
    upstream position, keeps a position per partition (a migration's re-keyed takeover)."""
    return f"{topic}[{partition}]"
