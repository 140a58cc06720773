"""Reads the facts the runtime needs from Spark's streaming checkpoint directory.

Spark writes ``offsets/<batch>`` (version line, batch metadata JSON with
``batchTimestampMs``, then one offset JSON per source) before a batch runs and
``commits/<batch>`` after it succeeds. A re-run batch keeps its logged timestamp, which is
why "wall-clock" punctuation uses it (invariant 2, docs/invariants.md). Batch N reads from the
offsets logged for batch N-1 to those logged for N, which is also how Spark itself asks
the source for the batch's partitions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.errors import StatekeeperError
from statekeeper.kafka.model import OffsetRange
from statekeeper.spark.offset_planning import offsets_from_dict


def _offset_log(checkpoint: Path, batch_id: int) -> list[str]:
    path = checkpoint / "offsets" / str(batch_id)
    try:
        return path.read_text().splitlines()
    except OSError as exc:
        raise StatekeeperError(f"cannot read Spark offset log {path}: {exc}") from exc


def batch_timestamp_ms(checkpoint: Path, batch_id: int) -> int:
    """The trigger time Spark logged for ``batch_id`` (identical when the batch re-runs)."""
    lines = _offset_log(checkpoint, batch_id)
    try:
        return int(json.loads(lines[1])["batchTimestampMs"])
    except (IndexError, KeyError, ValueError) as exc:
        raise StatekeeperError(
            f"Spark offset log {checkpoint}/offsets/{batch_id} has no batchTimestampMs: {exc}"
        ) from exc


def _committed_batches(checkpoint: Path) -> list[int]:
    """Batch ids in Spark's commit log, newest first."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return []
    return sorted((int(p.name) for p in commits.iterdir() if p.name.isdigit()), reverse=True)


def last_committed_batch(checkpoint: Path) -> int | None:
    """The newest batch id in Spark's commit log, if any."""
    done = _committed_batches(checkpoint)
    return done[0] if done else None


def last_committed_offsets(checkpoint: Path) -> dict[str, Any] | None:
    """The first source's end offsets (parsed JSON) of the newest committed batch, if any."""
    for batch_id in _committed_batches(checkpoint):
        lines = _offset_log(checkpoint, batch_id)
        if len(lines) >= 3 and lines[2] not in ("", "-"):
            return json.loads(lines[2])
    return None


def last_committed_positions(checkpoint: Path) -> dict[tuple[str, int], int]:
    """Where the newest committed batch ended, per ``(topic, partition)`` ({} when Spark
    committed none)."""
    ended = last_committed_offsets(checkpoint)
    return offsets_from_dict(ended, f"{checkpoint}/offsets") if ended else {}


def logged_batch_ranges(checkpoint: Path, batch_id: int) -> list[OffsetRange] | None:
    """The offset ranges of ``batch_id`` from the offset log: batch N-1's logged end offsets
    to batch N's. None when the log cannot say (batch 0, whose start Spark takes from the
    source's initial offset without logging it; a purged or unreadable entry; a partition
    that is new in this batch, whose start the source chose): ask the source instead."""
    if batch_id <= 0:
        return None
    try:
        end = _source_offsets(checkpoint, batch_id)
        start = _source_offsets(checkpoint, batch_id - 1)
    except (StatekeeperError, ValueError):
        return None
    if end is None or start is None or not end.keys() <= start.keys():
        return None
    return [
        OffsetRange(topic, partition, start[(topic, partition)], stop)
        for (topic, partition), stop in sorted(end.items())
        if stop > start[(topic, partition)]
    ]


def first_batch_ranges(
    checkpoint: Path, start: dict[tuple[str, int], int]
) -> list[OffsetRange] | None:
    """Batch 0's offset ranges when the query was told where to start (``start``: explicit
    ``startingOffsets``, as a takeover or a backfill's recorded start give it): from there to
    batch 0's logged end. None when the log has no batch 0, or ``start`` does not name a
    concrete offset for every partition it ends at (ask the source instead)."""
    try:
        end = _source_offsets(checkpoint, 0)
    except (StatekeeperError, ValueError):
        return None
    if end is None or not end.keys() <= start.keys() or any(start[tp] < 0 for tp in end):
        return None
    return [
        OffsetRange(topic, partition, start[(topic, partition)], stop)
        for (topic, partition), stop in sorted(end.items())
        if stop > start[(topic, partition)]
    ]


def _source_offsets(checkpoint: Path, batch_id: int) -> dict[tuple[str, int], int] | None:
    lines = _offset_log(checkpoint, batch_id)
    if len(lines) != 3 or lines[2] in ("", "-"):  # exactly one source, with an offset
        return None
    return offsets_from_dict(json.loads(lines[2]), f"offsets/{batch_id}")


@dataclass(frozen=True)
class CheckpointBatchLog:
    """Spark's offset and commit logs of one checkpoint, read the way the driver's batch
    planner asks for them (:class:`statekeeper.app.batch_planner.BatchLog`)."""

    checkpoint: Path

    def ranges(self, batch_id: int) -> list[OffsetRange] | None:
        return logged_batch_ranges(self.checkpoint, batch_id)

    def batch_time_ms(self, batch_id: int) -> int:
        return batch_timestamp_ms(self.checkpoint, batch_id)

    def last_committed_batch(self) -> int | None:
        return last_committed_batch(self.checkpoint)
