"""The audit history the State stores page reads: verdicts and reasons per app, newest first."""

from __future__ import annotations

from statekeeper.ops.audit.history import AuditHistory, audit_history_path


def _report(app: str, verdict: str, topics: list[tuple[str, str, list[str]]]) -> dict:
    return {
        "application_id": app,
        "verdict": verdict,
        "topics": [{"topic": t, "verdict": v, "reasons": r} for t, v, r in topics],
        "applied": [],
    }


def test_rows_keep_verdicts_and_reasons_per_app_newest_first(tmp_path):
    history = AuditHistory.under(tmp_path)
    assert history.path == audit_history_path(tmp_path) == tmp_path / ".audits/history.sqlite"
    assert history.rows("a") == []  # no file yet: no history, no error
    first = history.append(_report("a", "fail", [("a-s-changelog", "fail", ["retention.ms: low"])]))
    history.append(_report("b", "ok", [("b-s-changelog", "ok", [])]))
    second = history.append(_report("a", "ok", [("a-s-changelog", "ok", [])]))

    rows = history.rows("a")
    assert [r.audit_id for r in rows] == [second.audit_id, first.audit_id]
    assert [r.verdict for r in rows] == ["ok", "fail"]
    assert rows[1].reasons == ["fail a-s-changelog: retention.ms: low"]
    assert rows[0].reasons == [] and rows[0].topics == 1
    assert [r.app for r in history.rows("b")] == ["b"]
    assert history.report(first.audit_id)["verdict"] == "fail"
    assert history.report("nope") is None
