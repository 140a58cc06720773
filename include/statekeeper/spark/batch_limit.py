"""The records-per-batch limit the driver chose, handed to the stream source through a file.

The source plans each micro-batch in a Python worker that Spark owns, not in the driver's
Python process where the app decides the batch size (:mod:`statekeeper.app.batch_sizing`).
The driver writes the next batch's limit here before its ``foreachBatch`` returns; Spark
plans the next batch only after that, so the source reads the limit meant for it. The
source never plans past ``maxRecordsPerBatch`` (the ceiling) whatever the file says.
"""

from __future__ import annotations

import json
from pathlib import Path

from statekeeper.atomic_file import replace_text

#: The option naming the file (``batchLimitFile``), and the file's name in a checkpoint.
LIMIT_FILE_OPTION = "batchLimitFile"
LIMIT_FILE = "batch-limit.json"


def write_batch_limit(path: Path, records: int) -> None:
    """Record ``records`` as the next micro-batch's limit (atomically)."""
    replace_text(path, json.dumps({"records": int(records)}))


def read_batch_limit(path: Path | str) -> int | None:
    """The limit in ``path``; None when there is none or it is unreadable (the source then
    plans up to its ceiling, as without the file)."""
    try:
        records = json.loads(Path(path).read_text())["records"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return records if isinstance(records, int) and records > 0 else None
