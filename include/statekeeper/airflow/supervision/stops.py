"""Intended stops: a stop asked for (``make down``, ``statekeeper platform down``, the DAG's
``action=stop|restart|redeploy``) is written down *before* the app is signalled, so whoever
later finds the process gone can tell it from a crash.

The record lives beside the app's status file (``<state_dir>/<app>/intended_stop.json``),
where the supervisor, the platform and ``statekeeper platform status`` all look, and names
the launch it is about by pid *and* start time (``/proc/<pid>/stat`` field 22): a record
about another launch never excuses this one's exit. It also says what should happen next
(``then``):

- :data:`RELAUNCH` — a stop of the whole platform: the supervisor relaunches the app when
  it runs again, and that relaunch is not a restart (not counted towards FAILED);
- :data:`STAY_STOPPED` — an operator's ``action=stop`` (or ``enabled: false``);
- :data:`CALLER_RELAUNCHES` — ``action=restart|redeploy``: the stopping task launches the
  app again itself; a watch of the old launch just ends.

A few recent records are kept (newest first), so a slow watcher of an older launch still
finds its own. No Airflow, no processes: plain files.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from statekeeper.atomic_file import replace_text

#: The file beside the app's status file.
STOP_FILE = "intended_stop.json"
#: Records kept per app (newest first).
KEEP = 8

RELAUNCH = "relaunch"
STAY_STOPPED = "stay_stopped"
CALLER_RELAUNCHES = "caller_relaunches"
THEN = (RELAUNCH, STAY_STOPPED, CALLER_RELAUNCHES)


@dataclass(frozen=True)
class IntendedStop:
    """One stop asked for: which launch (``pid``, ``start_ticks``), by whom (``by``, a
    phrase such as ``"platform down"`` or ``"action=stop (run manual__...)"``), when
    (``at``, epoch seconds) and what should happen next (``then``, one of :data:`THEN`)."""

    pid: int
    start_ticks: int
    by: str
    then: str
    at: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Any) -> IntendedStop | None:
        """The record in ``doc``, or None when it is not one."""
        try:
            stop = cls(
                int(doc["pid"]),
                int(doc["start_ticks"]),
                str(doc["by"]),
                str(doc["then"]),
                float(doc["at"]),
            )
        except (KeyError, TypeError, ValueError):
            return None
        return stop if stop.then in THEN else None

    def describe(self) -> str:
        """``"stopped as intended by platform down at 2026-11-27 19:02:03 UTC"``."""
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.at))
        return f"stopped as intended by {self.by} at {when}"


def stop_file(app_dir: str | Path) -> Path:
    """The intended-stop file of the app whose status file is in ``app_dir``."""
    return Path(app_dir) / STOP_FILE


def read_intended_stops(app_dir: str | Path) -> list[IntendedStop]:
    """Every readable record, newest first ([] when there is no file or it is unreadable)."""
    try:
        doc = json.loads(stop_file(app_dir).read_text())
    except (OSError, ValueError):
        return []
    stops = [IntendedStop.from_json(entry) for entry in (doc.get("stops") or [])]
    return [s for s in stops if s is not None]


def record_intended_stop(
    app_dir: str | Path, pid: int, start_ticks: int, *, by: str, then: str
) -> IntendedStop:
    """Write down that launch ``(pid, start_ticks)`` is about to be stopped on purpose.
    Call it before signalling the app. Atomic (write, then rename)."""
    if then not in THEN:
        raise ValueError(f"intended stop: then={then!r}, expected one of {THEN}")
    stop = IntendedStop(int(pid), int(start_ticks), by, then, time.time())
    older = [
        s
        for s in read_intended_stops(app_dir)
        if (s.pid, s.start_ticks) != (stop.pid, stop.start_ticks)
    ]
    doc = {"stops": [s.to_json() for s in [stop, *older][:KEEP]]}
    replace_text(stop_file(app_dir), json.dumps(doc, indent=2) + "\n")
    return stop


def intended_stop_of(app_dir: str | Path, pid: int, start_ticks: int) -> IntendedStop | None:
    """The record about launch ``(pid, start_ticks)``, if its stop was intended."""
    for stop in read_intended_stops(app_dir):
        if stop.pid == int(pid) and stop.start_ticks == int(start_ticks):
            return stop
    return None
