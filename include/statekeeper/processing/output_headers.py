"""Dedupe headers on every record a task emits (outputs, repartition records, DLQ records).

``sk.app``, ``sk.task``, ``sk.batch`` (ascii int), ``sk.seq`` (ascii int: position in the
task-batch's output sequence), ``sk.source`` (``topic:partition:offset``) and, from a task
with an epoch, ``sk.epoch`` (ascii int, docs/fencing.md). The dedupe id of a record is
``(sk.task, sk.batch, sk.seq)``; a deterministic re-run of a batch (docs/fencing.md,
"Determinism") re-emits the same ids, so consumers keep the first copy. Once a partition
holds a record of a task under epoch E, a later record of that task under an older epoch
comes from a fenced (frozen and resumed) writer: readers drop it (:class:`EpochFence`).
"""

from __future__ import annotations

from collections.abc import Sequence

APP = "sk.app"
TASK = "sk.task"
BATCH = "sk.batch"
SEQ = "sk.seq"
SOURCE = "sk.source"
EPOCH = "sk.epoch"
PREFIX = "sk."

HeaderList = list[tuple[str, bytes | None]]


class OutputHeaders:
    """Builds the headers of one task-batch's outputs; ``seq`` counts emitted records."""

    __slots__ = ("fixed", "seq", "epoch")

    def __init__(self, application_id: str, task_id: str, batch_id: int, epoch: int = 0) -> None:
        self.fixed = (
            (APP, application_id.encode()),
            (TASK, task_id.encode()),
            (BATCH, str(batch_id).encode()),
        )
        self.seq = 0
        #: Appended after ``sk.source`` (None: no epoch, no header).
        self.epoch: tuple[str, bytes] | None = (EPOCH, b"%d" % epoch) if epoch else None

    def next(self, source: bytes, extra: Sequence[tuple[str, bytes | None]] = ()) -> HeaderList:
        """Headers for the next record; ``extra`` (input headers) are kept minus ``sk.*``."""
        seq = self.seq
        self.seq = seq + 1
        fixed = self.fixed
        headers: HeaderList = [fixed[0], fixed[1], fixed[2], (SEQ, b"%d" % seq), (SOURCE, source)]
        if self.epoch is not None:
            headers.append(self.epoch)
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


def record_epoch(headers: Sequence[tuple[str, bytes | None]]) -> int:
    """The ``sk.epoch`` of a record (0 when it has none)."""
    if len(headers) > 5 and headers[5][0] == EPOCH:  # the layout OutputHeaders writes
        raw = headers[5][1]
    else:
        raw = next((v for k, v in headers if k == EPOCH), None)
    try:
        return int(raw) if raw is not None else 0
    except ValueError:
        return 0


class EpochFence:
    """Per upstream task, the newest epoch seen in one partition, read in offset order: a
    record of an older epoch after it is fenced (its writer was superseded)."""

    __slots__ = ("newest", "fenced")

    def __init__(self, newest: dict[bytes, int] | None = None) -> None:
        self.newest: dict[bytes, int] = newest if newest is not None else {}
        self.fenced = 0

    def admits(self, task: bytes, epoch: int) -> bool:
        newest = self.newest.get(task, 0)
        if 0 < epoch < newest:  # epoch 0: written without fencing, never fenced
            self.fenced += 1
            return False
        if epoch > newest:
            self.newest[task] = epoch
        return True
