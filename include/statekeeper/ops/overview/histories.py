"""Past drills and audits of an app, from the histories under its state root.

Drills: ``<state_dir>/.drills/history.sqlite`` (:mod:`statekeeper.ops.drill.history`), each
with its RTO, RPO (snapshot age, source and changelog records behind), pass/fail, and the
report files that exist (``report.html``, Data Docs), as paths relative to the drill's
report directory. Audits: ``<state_dir>/.audits/history.sqlite``
(:mod:`statekeeper.ops.audit.history`).
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from statekeeper.ops.audit.history import AuditHistory
from statekeeper.ops.drill.history import DrillHistory, history_path
from statekeeper.ops.drill.record import CHECKS

#: Report files a drill row links to when they exist: name -> path in the report directory.
REPORT_FILES = {"report": "report.html", "data_docs": "data_docs/index.html"}


def drill_rows(state_dir: Path, application_id: str, limit: int = 50) -> list[dict[str, Any]]:
    """The app's last ``limit`` drills, oldest first (the trend chart's order)."""
    history = DrillHistory(history_path(state_dir))
    rows = []
    for row in history.rows(application_id, limit):
        record = history.record(row.drill_id)
        report_dir = Path(row.report_dir)
        rows.append(
            {
                "drill_id": row.drill_id,
                "started_at": row.started_at,
                "finished_at": record.finished_at if record else None,
                "passed": row.passed,
                "rto_s": row.rto_s,
                "wall_s": row.wall_s,
                "rpo_snapshot_age_s": record.snapshot_age_s if record else None,
                "rpo_source_records_behind": record.source_records_behind if record else None,
                "rpo_changelog_records_behind": (
                    record.changelog_records_behind if record else None
                ),
                "records_replayed": row.records_replayed,
                "from_snapshot": record.from_snapshot if record else None,
                "checks": {c: record.check_status(c) for c in CHECKS} if record else {},
                "failures": record.failures() if record and not row.passed else [],
                "report_dir": row.report_dir,
                "files": {
                    name: rel for name, rel in REPORT_FILES.items() if (report_dir / rel).is_file()
                },
            }
        )
    return rows


def audit_rows(state_dir: Path, application_id: str, limit: int = 20) -> list[dict[str, Any]]:
    """The app's last ``limit`` audit verdicts, newest first."""
    return [asdict(row) for row in AuditHistory.under(state_dir).rows(application_id, limit)]


def report_dir_of(state_dir: Path, application_id: str, drill_id: str) -> Path | None:
    """The report directory of one drill of the app, or None when the history has no such
    drill (of that app)."""
    record = DrillHistory(history_path(state_dir)).record(drill_id)
    if record is None or record.app != application_id or not record.report_dir:
        return None
    return Path(record.report_dir)
