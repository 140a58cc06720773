"""Drill history: one SQLite table under the state root, shared by every app.

Where: ``<state_dir>/.drills/history.sqlite`` (:func:`history_path`), beside the apps'
state directories (``<state_dir>/<app>/``) but outside any of them, so no task directory scan
ever sees it. One row per drill; the full record JSON is kept too, so the HTML report can
show past drills without their report directories.
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.ops.drill.record import DrillRecord

DRILLS_DIR = ".drills"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS drills (
    drill_id TEXT PRIMARY KEY,
    app TEXT NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT NOT NULL,
    passed INTEGER NOT NULL,
    rto_s REAL NOT NULL,
    wall_s REAL NOT NULL,
    snapshot_age_s REAL,
    source_records_behind INTEGER NOT NULL,
    records_replayed INTEGER NOT NULL,
    bytes_downloaded INTEGER NOT NULL,
    report_dir TEXT NOT NULL,
    record_json TEXT NOT NULL
)
"""


def drills_root(state_dir: Path) -> Path:
    """``<state_dir>/.drills``: history, and default report directories."""
    return Path(state_dir) / DRILLS_DIR


def history_path(state_dir: Path) -> Path:
    return drills_root(state_dir) / "history.sqlite"


@dataclass(frozen=True)
class HistoryRow:
    """A past drill, as the trend chart needs it."""

    drill_id: str
    app: str
    started_at: str
    passed: bool
    rto_s: float
    wall_s: float
    records_replayed: int
    report_dir: str


class DrillHistory:
    """The drills table (created on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=10)
        conn.execute(_SCHEMA)
        return conn

    def append(self, record: DrillRecord) -> None:
        """Store one finished drill (a drill id is stored once)."""
        with closing(self._connect()) as conn, conn:
            conn.execute(
                "INSERT INTO drills VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    record.drill_id,
                    record.app,
                    record.started_at,
                    record.finished_at,
                    int(record.passed),
                    record.rto_s,
                    record.wall_s,
                    record.snapshot_age_s,
                    record.source_records_behind,
                    record.records_replayed,
                    record.bytes_downloaded,
                    record.report_dir,
                    record.to_json(),
                ),
            )

    def rows(self, app: str, limit: int = 50) -> list[HistoryRow]:
        """The app's last ``limit`` drills, oldest first."""
        if not self.path.exists():
            return []
        with closing(self._connect()) as conn:
            found = conn.execute(
                "SELECT drill_id, app, started_at, passed, rto_s, wall_s, records_replayed, "
                "report_dir FROM drills WHERE app = ? ORDER BY started_at DESC LIMIT ?",
                (app, limit),
            ).fetchall()
        return [HistoryRow(r[0], r[1], r[2], bool(r[3]), r[4], r[5], r[6], r[7]) for r in found][
            ::-1
        ]

    def record(self, drill_id: str) -> DrillRecord | None:
        """The full record of one drill, or None."""
        if not self.path.exists():
            return None
        with closing(self._connect()) as conn:
            row = conn.execute(
                "SELECT record_json FROM drills WHERE drill_id = ?", (drill_id,)
            ).fetchone()
        return None if row is None else DrillRecord.from_dict(json.loads(row[0]))

    def as_dicts(self, app: str, limit: int = 50) -> list[dict[str, Any]]:
        return [row.__dict__ for row in self.rows(app, limit)]
