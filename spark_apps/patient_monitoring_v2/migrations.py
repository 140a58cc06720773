"""patient_monitoring v1 → v2, per store (the spec's ``migrations:``; docs/changing-apps.md).

``statekeeper upgrade migrate`` calls each function once per entry of v1's committed state,
decoded with v1's serdes, and writes what it returns through v2's store (``heart-rate``:
its serde checks the v2 schema). Stores without a function here are copied as they are
(``pulse-counts``, the suppression buffer, the task state); ``temperature-peaks`` is new
and starts empty. Like the topology file this file is loaded by path and shipped to Spark
executors by value: import only statekeeper and the standard library here.
"""

from __future__ import annotations

from typing import Any

#: v1's pulse windows: 60 s tumbling (its spec does not change the topology's default).
V1_WINDOW_MS = 60_000


def heart_rate_v2(patient: str, entry: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """v1's ``{"bpm", "window_start"}`` → v2's, with the window's end."""
    return patient, {
        "bpm": entry["bpm"],
        "window_start": entry["window_start"],
        "window_end": entry["window_start"] + V1_WINDOW_MS,
    }
