"""Read an app's output or DLQ topic the way a deduplicating consumer would (R4)."""

from __future__ import annotations

from typing import Any

from statekeeper.errors import StatekeeperError
from statekeeper.kafka.model import KafkaRecord
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.processing.output_headers import SOURCE, EpochFence, dedupe_id, record_epoch


def read_deduped(
    bootstrap: str, topic: str, timeout_s: float = 60.0, fences: list[EpochFence] | None = None
) -> list[KafkaRecord]:
    """Records of ``topic`` in partition/offset order, the first copy per dedupe id only,
    without the records of superseded epochs.

    A re-run batch re-emits identical records with the same ``(sk.task, sk.batch, sk.seq)``,
    so what remains is exactly-once output. A record of a task under an older epoch than one
    already seen in its partition comes from a frozen writer that resumed after its task
    moved (docs/fencing.md): it is dropped, and counted in the :class:`EpochFence` appended
    to ``fences`` (one per partition) when given.
    """
    seen: set[Any] = set()
    out = []
    for _partition, records in sorted(read_topic(bootstrap, topic, timeout_s=timeout_s).items()):
        fence = EpochFence()
        if fences is not None:
            fences.append(fence)
        for record in records:
            rid = dedupe_id(record.headers)
            if rid is None:
                raise StatekeeperError(
                    f"{topic}[{record.partition}]@{record.offset} has no sk.* dedupe headers"
                )
            if not fence.admits(rid[0], record_epoch(record.headers)):
                continue
            if rid not in seen:
                seen.add(rid)
                out.append(record)
    return out


def source_positions(records: list[KafkaRecord]) -> list[tuple[str, int, int]]:
    """The ``sk.source`` header of each record as (topic, partition, offset)."""
    out = []
    for record in records:
        raw = dict(record.headers).get(SOURCE)
        if raw is None:
            raise StatekeeperError(f"record at offset {record.offset} has no {SOURCE} header")
        topic, partition, offset = raw.decode().rsplit(":", 2)
        out.append((topic, int(partition), int(offset)))
    return out
