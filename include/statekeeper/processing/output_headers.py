"""Dedupe headers on every record a task emits (outputs, repartition records, DLQ records).

``sk.app``, ``sk.task``, ``sk.batch`` (ascii int), ``sk.seq`` (ascii int: position in the
task-batch's output sequence) and ``sk.source`` (``topic:partition:offset``). The dedupe id
of a record is ``(sk.task, sk.batch, sk.seq)``; a deterministic re-run of a batch (DESIGN.md
invariant 2) re-emits the same ids, so consumers keep the first copy.
"""

from __future__ import annotations

from collections.abc import Sequence

APP = "sk.app"
TASK = "sk.task"
BATCH = "sk.batch"
SEQ = "sk.seq"
SOURCE = "sk.source"
PREFIX = "sk."

HeaderList = list[tuple[str, bytes | None]]


class OutputHeaders:
    """Builds the headers of one task-batch's outputs; ``seq`` counts emitted records."""

    __slots__ = ("fixed", "seq")

    def __init__(self, application_id: str, task_id: str, batch_id: int) -> None:
        self.fixed = (
            (APP, application_id.encode()),
            (TASK, task_id.encode()),
            (BATCH, str(batch_id).encode()),
        )
        self.seq = 0

    def next(self, source: bytes, extra: Sequence[tuple[str, bytes | None]] = ()) -> HeaderList:
        """Headers for the next record; ``extra`` (input headers) are kept minus ``sk.*``."""
        seq = self.seq
        self.seq = seq + 1
        fixed = self.fixed
        headers: HeaderList = [fixed[0], fixed[1], fixed[2], (SEQ, b"%d" % seq), (SOURCE, source)]
        if extra:
            headers.extend(h for h in extra if not h[0].startswith(PREFIX))
        return headers


def source_ref(topic: str, partition: int, offset: int) -> bytes:
    """``topic:partition:offset`` as bytes (the ``sk.source`` header)."""
    return b"%s:%d:%d" % (topic.encode(), partition, offset)


def dedupe_id(headers: Sequence[tuple[str, bytes | None]]) -> tuple[bytes, int, int] | None:
    """``(task, batch, seq)`` from a record's headers, or None if it carries no dedupe id."""
    # Fast path: the layout OutputHeaders writes.
    if (
        len(headers) >= 4
        and headers[1][0] == TASK
        and headers[2][0] == BATCH
        and headers[3][0] == SEQ
    ):
        task, batch, seq = headers[1][1], headers[2][1], headers[3][1]
    else:
        found = {k: v for k, v in headers if k in (TASK, BATCH, SEQ)}
        task, batch, seq = found.get(TASK), found.get(BATCH), found.get(SEQ)
    if task is None or batch is None or seq is None:
        return None
    try:
        return task, int(batch), int(seq)
    except ValueError:
        return None
