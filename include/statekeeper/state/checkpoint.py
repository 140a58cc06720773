"""The human-readable ``.checkpoint`` file: changelog offsets per store partition.

The authoritative offsets live inside each RocksDB store, written atomically with the
data (invariant 3); this file is for operators and tools, written after each commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from statekeeper.atomic_file import replace_text


def write_checkpoint(path: Path, entries: dict[str, dict[str, Any]]) -> None:
    """Atomically replace ``path`` with one line per store: ``topic partition offset``.

    A JSON header line keeps batch ids and source offsets for tools.
    """
    lines = ["# statekeeper checkpoint v1: <changelog topic> <partition> <marker offset>"]
    for _store, entry in sorted(entries.items()):
        lines.append(f"{entry['topic']} {entry['partition']} {entry['offset']}")
    lines.append("# " + json.dumps(entries, sort_keys=True))
    replace_text(path, "\n".join(lines) + "\n")


def read_checkpoint(path: Path) -> dict[str, dict[str, Any]]:
    """The entries :func:`write_checkpoint` wrote (store -> topic, partition, offset,
    batch_id, source_offsets); ``{}`` when the file is missing or has no JSON line."""
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return {}
    for line in reversed(lines):
        if line.startswith("# {"):
            return dict(json.loads(line[2:]))
    return {}
