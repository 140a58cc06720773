"""Where an app's query starts, recorded in its Spark checkpoint directory.

Spark does not log where a query's first micro-batch starts: when batch 0 runs again after a
crash, Spark asks the source for its initial offsets again, which ``startingOffsets`` gives.
A backfill (:mod:`statekeeper.backfill`) that starts a new query at offsets of its own
(``--from``: the log start or a timestamp) records them here, in
``<checkpoint>/statekeeper-start.json``, before the query starts; every later start of the
app's query, the backfill's and the stream's, passes them as ``startingOffsets``, so a batch
0 that runs again reads what it read the first time. Without the file nothing changes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.atomic_file import replace_text
from statekeeper.errors import StatekeeperError
from statekeeper.spark.offset_planning import TP, offsets_from_dict, offsets_to_dict

START_FILE = "statekeeper-start.json"


@dataclass(frozen=True)
class RecordedStart:
    """The offsets a query started at and what chose them (``earliest``, a timestamp)."""

    offsets: dict[TP, int]
    chosen_by: str

    def starting_offsets_json(self) -> str:
        return json.dumps(offsets_to_dict(self.offsets), separators=(",", ":"))


def record_start(checkpoint: Path, offsets: dict[TP, int], chosen_by: str) -> RecordedStart:
    """Write the record (atomically) and return it."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    path = checkpoint / START_FILE
    doc: dict[str, Any] = {
        "starting_offsets": offsets_to_dict(offsets),
        "chosen_by": chosen_by,
        "recorded_at": time.time(),
    }
    replace_text(path, json.dumps(doc, indent=1, sort_keys=True))
    return RecordedStart(dict(offsets), chosen_by)


def read_start(checkpoint: Path) -> RecordedStart | None:
    """The record of ``checkpoint``, None when there is none; an unreadable one is an error
    (starting elsewhere could skip or repeat records)."""
    path = checkpoint / START_FILE
    try:
        doc = json.loads(path.read_text())
        return RecordedStart(
            offsets_from_dict(doc["starting_offsets"], str(path)), str(doc["chosen_by"])
        )
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise StatekeeperError(
            f"cannot read the query's recorded start {path}: {exc}; it says where the app's "
            "first micro-batch starts: restore it, or remove the whole checkpoint directory"
        ) from exc
