"""Drill history: one SQLite table under the state root, shared by every app.

Where: ``<state_dir>/.drills/history.sqlite`` (:func:`history_path`), beside the apps'
state directories (``<state_dir>/<app>/``) but outside any of them, so no task directory scan
ever sees it. One row per drill, errored ones included (``status`` ``error``); the full
record JSON is kept too, so the HTML report can show past drills without their report
directories. A table written before a column existed gets it on first use (older rows: NULL,
their status derived from ``passed``).
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.ops.drill.record import FAIL, PASS, DrillRecord

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
    record_json TEXT NOT NULL,
    status TEXT,
    committed_records_behind INTEGER
)
"""
#: Columns added after the first schema: ``ALTER TABLE`` adds them to an older table.
_ADDED = {"status": "TEXT", "committed_records_behind": "INTEGER"}
_COLUMNS = (
    "drill_id",
    "app",
    "started_at",
    "finished_at",
    "passed",
    "rto_s",
    "wall_s",
    "snapshot_age_s",
    "source_records_behind",
    "records_replayed",
    "bytes_downloaded",
    "report_dir",
    "record_json",
    "status",
    "committed_records_behind",
)


def drills_root(state_dir: Path) -> Path:
    """``<state_dir>/.drills``: history, and default report directories."""
    return Path(state_dir) / DRILLS_DIR


def history_path(state_dir: Path) -> Path:
    return drills_root(state_dir) / "history.sqlite"


@dataclass(frozen=True)
class HistoryRow:
    """A past drill, as the trend chart needs it; ``status`` is ``pass``, ``fail`` or
    ``error`` (empty: derived from ``passed``)."""

    drill_id: str
    app: str
    started_at: str
    passed: bool
    rto_s: float
    wall_s: float
    records_replayed: int
    report_dir: str
    status: str = ""

    @property
    def outcome(self) -> str:
        """``status``, or for a row without one ``pass``/``fail`` from ``passed``."""
        return self.status or (PASS if self.passed else FAIL)


class DrillHistory:
    """The drills table (created on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=10)
        conn.execute(_SCHEMA)
        have = {row[1] for row in conn.execute("PRAGMA table_info(drills)")}
        for column, kind in _ADDED.items():
            if column not in have:
                try:
                    conn.execute(f"ALTER TABLE drills ADD COLUMN {column} {kind}")
                except sqlite3.OperationalError as exc:  # another process added it meanwhile
                    if "duplicate column" not in str(exc):
                        raise
        return conn

    def append(self, record: DrillRecord) -> None:
        """Store one drill, finished or errored (a drill id is stored once)."""
        with closing(self._connect()) as conn, conn:
            conn.execute(
                f"INSERT INTO drills ({', '.join(_COLUMNS)}) "
                f"VALUES ({', '.join('?' * len(_COLUMNS))})",
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
                    record.status,
                    record.committed_records_behind,
                ),
            )

    def rows(self, app: str, limit: int = 50) -> list[HistoryRow]:
        """The app's last ``limit`` drills, oldest first."""
        if not self.path.exists():
            return []
        with closing(self._connect()) as conn:
            found = conn.execute(
                "SELECT drill_id, app, started_at, passed, rto_s, wall_s, records_replayed, "
                "report_dir, status FROM drills WHERE app = ? ORDER BY started_at DESC LIMIT ?",
                (app, limit),
            ).fetchall()
        rows = [
            HistoryRow(r[0], r[1], r[2], bool(r[3]), r[4], r[5], r[6], r[7], r[8] or "")
            for r in found
        ]
        return rows[::-1]

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
