"""Audit history: one SQLite table under the state root, shared by every app.

Where: ``<state_dir>/.audits/history.sqlite`` (:func:`audit_history_path`), beside the drill
history (``<state_dir>/.drills/``) and outside every app's state directory. One row per
audit run with its verdict, a one-line reason per topic that did not pass, and the full
report JSON, so the State stores page shows past verdicts without re-running an audit.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.snapshots.manifest import utc_now

AUDITS_DIR = ".audits"
_SCHEMA = """
CREATE TABLE IF NOT EXISTS audits (
    audit_id TEXT PRIMARY KEY,
    app TEXT NOT NULL,
    audited_at TEXT NOT NULL,
    verdict TEXT NOT NULL,
    topics INTEGER NOT NULL,
    fixes_applied INTEGER NOT NULL,
    reasons_json TEXT NOT NULL,
    report_json TEXT NOT NULL
)
"""


def audit_history_path(state_dir: Path) -> Path:
    """``<state_dir>/.audits/history.sqlite``."""
    return Path(state_dir) / AUDITS_DIR / "history.sqlite"


@dataclass(frozen=True)
class AuditRow:
    """One past audit of one app: its verdict and why."""

    audit_id: str
    app: str
    audited_at: str
    verdict: str
    topics: int
    fixes_applied: int
    #: ``"<verdict> <topic>: <reason>"`` for each topic whose verdict is not ``ok``.
    reasons: list[str] = field(default_factory=list)


class AuditHistory:
    """The audits table (created on first use)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    @classmethod
    def under(cls, state_dir: Path) -> AuditHistory:
        """The history of the state root ``state_dir``."""
        return cls(audit_history_path(state_dir))

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=10)
        conn.execute(_SCHEMA)
        return conn

    def append(self, report: dict[str, Any]) -> AuditRow:
        """Store one audit, given as :meth:`AuditReport.to_dict` returns it; returns its row."""
        reasons = [
            f"{topic['verdict']} {topic['topic']}: {'; '.join(topic.get('reasons') or [])}"
            for topic in report.get("topics", [])
            if topic.get("verdict") != "ok"
        ]
        now = utc_now()
        row = AuditRow(
            audit_id=f"{now.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}",
            app=report["application_id"],
            audited_at=now.isoformat(),
            verdict=report["verdict"],
            topics=len(report.get("topics", [])),
            fixes_applied=len(report.get("applied", [])),
            reasons=reasons,
        )
        with closing(self._connect()) as conn, conn:
            conn.execute(
                "INSERT INTO audits VALUES (?,?,?,?,?,?,?,?)",
                (
                    row.audit_id,
                    row.app,
                    row.audited_at,
                    row.verdict,
                    row.topics,
                    row.fixes_applied,
                    json.dumps(reasons),
                    json.dumps(report, sort_keys=True, default=str),
                ),
            )
        return row

    def rows(self, app: str, limit: int = 20) -> list[AuditRow]:
        """The app's last ``limit`` audits, newest first."""
        if not self.path.exists():
            return []
        with closing(self._connect()) as conn:
            found = conn.execute(
                "SELECT audit_id, app, audited_at, verdict, topics, fixes_applied, reasons_json "
                "FROM audits WHERE app = ? ORDER BY audited_at DESC LIMIT ?",
                (app, limit),
            ).fetchall()
        return [AuditRow(*r[:6], reasons=json.loads(r[6])) for r in found]

    def report(self, audit_id: str) -> dict[str, Any] | None:
        """The full report of one audit, or None."""
        if not self.path.exists():
            return None
        with closing(self._connect()) as conn:
            row = conn.execute(
                "SELECT report_json FROM audits WHERE audit_id = ?", (audit_id,)
            ).fetchone()
        return None if row is None else json.loads(row[0])
