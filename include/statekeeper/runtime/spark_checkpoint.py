"""Reads the two facts the runtime needs from Spark's streaming checkpoint directory.

Spark writes ``offsets/<batch>`` (version line, batch metadata JSON with
``batchTimestampMs``, then one offset JSON per source) before a batch runs and
``commits/<batch>`` after it succeeds. A re-run batch keeps its logged timestamp, which is
why "wall-clock" punctuation uses it (DESIGN.md invariant 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from statekeeper.errors import StatekeeperError


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


def last_committed_offsets(checkpoint: Path) -> dict[str, Any] | None:
    """The first source's end offsets (parsed JSON) of the newest committed batch, if any."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        return None
    done = sorted((int(p.name) for p in commits.iterdir() if p.name.isdigit()), reverse=True)
    for batch_id in done:
        lines = _offset_log(checkpoint, batch_id)
        if len(lines) >= 3 and lines[2] not in ("", "-"):
            return json.loads(lines[2])
    return None
