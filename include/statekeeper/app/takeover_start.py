"""A new version's first start on migrated state: adopting the takeover record.

The migration leaves ``takeover.json`` in the new version's state root
(:mod:`statekeeper.versions.takeover`). The first start (its Spark checkpoint has no offset
log yet) copies it into the checkpoint directory, where every later start reads it: the batch
numbering, the floors and the carried ranges of one query never change. What the driver does
with it:

- Spark batch ``s`` is statekeeper batch ``s + batch_base`` (:class:`ShiftedBatchLog` for the
  planner's reads of Spark's logs);
- the query starts at the record's ``start_offsets``;
- each task's ranges are clipped to its subtopology's floors (the planner);
- the first micro-batch also reads the carried old repartition ranges, recorded with that
  batch's ranges (:func:`record_first_batch`), so a replay of it after a crash reads the same.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from statekeeper.atomic_file import replace_text
from statekeeper.kafka.model import OffsetRange
from statekeeper.versions.takeover import (
    Takeover,
    TakeoverError,
    read_takeover,
    takeover_path,
    write_takeover,
)

log = logging.getLogger(__name__)

#: The adopted record, in the app's Spark checkpoint directory.
ADOPTED_FILE = "statekeeper-takeover.json"
#: The first micro-batch's ranges (Spark's offset log cannot say where batch 0 started).
FIRST_BATCH_FILE = "statekeeper-batch-0.json"


def adopt_takeover(checkpoint: Path, state_root: Path) -> Takeover | None:
    """The takeover this app's query runs under: the adopted one, or the state root's at a
    first start (copied into ``checkpoint`` first); None when there is none."""
    adopted = read_takeover(checkpoint / ADOPTED_FILE)
    if adopted is not None:
        return adopted
    offered_path = takeover_path(state_root)
    offered = read_takeover(offered_path)
    if offered is None:
        return None
    pending = offered.extra.get("pending")
    if pending:
        raise TakeoverError(
            f"{offered_path}: {pending} and has not finished: this version cannot start on "
            "its state until `statekeeper upgrade migrate` ends (run it again if it died)"
        )
    if (checkpoint / "offsets").is_dir() and any((checkpoint / "offsets").iterdir()):
        log.warning(
            "%s is ignored: this app's query ran before the migration that wrote it", offered_path
        )
        return None
    write_takeover(checkpoint / ADOPTED_FILE, offered)
    log.info(
        "taking over from %s: batches continue at %d, %d carried repartition range(s)",
        offered.from_application_id,
        offered.batch_base,
        len(offered.carried_ranges()),
    )
    return offered


def record_first_batch(checkpoint: Path, ranges: list[OffsetRange]) -> list[OffsetRange]:
    """Record the first micro-batch's ranges, or return those recorded by an earlier run of
    it (Spark runs batch 0 again after a crash; it must read the same)."""
    path = checkpoint / FIRST_BATCH_FILE
    recorded = read_first_batch(checkpoint)
    if recorded is not None:
        return recorded
    replace_text(path, json.dumps([[r.topic, r.partition, r.start, r.end] for r in ranges]))
    return ranges


def read_first_batch(checkpoint: Path) -> list[OffsetRange] | None:
    try:
        rows = json.loads((checkpoint / FIRST_BATCH_FILE).read_text())
    except FileNotFoundError:
        return None
    return [OffsetRange(str(t), int(p), int(s), int(e)) for t, p, s, e in rows]


@dataclass(frozen=True)
class ShiftedBatchLog:
    """Spark's logs read in statekeeper batch ids: Spark batch ``s`` is ``s + base``; the
    first batch's ranges come from :func:`record_first_batch`'s file."""

    inner: object
    checkpoint: Path
    base: int

    def ranges(self, batch_id: int) -> list[OffsetRange] | None:
        spark_id = batch_id - self.base
        if spark_id < 0:
            return None
        if spark_id == 0:
            return read_first_batch(self.checkpoint)
        return self.inner.ranges(spark_id)  # type: ignore[attr-defined]

    def batch_time_ms(self, batch_id: int) -> int:
        return self.inner.batch_time_ms(batch_id - self.base)  # type: ignore[attr-defined]

    def last_committed_batch(self) -> int | None:
        last = self.inner.last_committed_batch()  # type: ignore[attr-defined]
        return None if last is None else last + self.base
