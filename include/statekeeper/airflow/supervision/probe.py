"""One health check of a launched app: its process and its status document.

The status comes from the app's endpoint (``status_url`` in its status file) when it
answers within the timeout, else from the status file itself, whose modification time then
tells how fresh it is (the driver rewrites it every ~2 s while it runs). A document is
taken only when it belongs to this launch: its ``started_at`` is not before the launch (a
previous run's file is still there until the new driver writes its own).

Blocking (file and HTTP reads): the trigger runs it in a thread.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path
from typing import Any

from statekeeper.airflow.supervision.policy import Observation
from statekeeper.airflow.supervision.process import AppProcessIdentity

#: A status document written up to this long before the launch time still counts (clocks).
CLOCK_SLACK_S = 1.0


def read_status_file(path: str | Path) -> tuple[dict[str, Any] | None, float | None]:
    """``(document, modification time)``; ``(None, None)`` when missing or unreadable."""
    try:
        path = Path(path)
        mtime = path.stat().st_mtime
        return json.loads(path.read_text()), mtime
    except (OSError, ValueError):
        return None, None


def get_status(url: str, timeout_s: float) -> dict[str, Any] | None:
    """The document ``GET url`` answers, or None (refused, timed out, not JSON)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            doc = json.load(resp)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def of_launch(doc: dict[str, Any] | None, launched_at: float) -> dict[str, Any] | None:
    """``doc`` if it was written by a process started at or after ``launched_at``."""
    if doc is None:
        return None
    started = doc.get("started_at")
    if started is None or float(started) < launched_at - CLOCK_SLACK_S:
        return None
    return doc


def observe(
    status_file: str,
    launched_at: float,
    status_timeout_s: float,
    identity: AppProcessIdentity | None = None,
) -> Observation:
    """Check the process (when ``identity`` is given) and read the status of this launch;
    a process found gone carries its intended-stop record, if somebody stopped it on
    purpose."""
    now = time.time()
    alive, detail = identity.alive() if identity is not None else (None, "")
    stop = identity.intended_stop() if identity is not None and alive is False else None
    intended = stop.to_json() if stop is not None else None
    from_file, mtime = read_status_file(status_file)
    from_file = of_launch(from_file, launched_at)
    url = (from_file or {}).get("status_url")
    if url and (from_file or {}).get("state") not in ("NOT_RUNNING", "ERROR"):
        live = of_launch(get_status(url, status_timeout_s), launched_at)
        if live is not None:
            return Observation(now, alive, detail, live, time.time(), "url", intended)
    if from_file is not None:
        return Observation(now, alive, detail, from_file, mtime, "file", intended)
    return Observation(now, alive, detail, intended_stop=intended)
