"""Drill reports an operator can act on (pure parts): mismatching keys with their values,
RPO order, errored drills in the record, history and report, offline Data Docs pages."""

from __future__ import annotations

import re
import sqlite3
import struct

from statekeeper.ops.drill.contents import (
    diff_contents,
    diff_result,
    live_values,
    mismatches,
    show_value,
)
from statekeeper.ops.drill.history import DrillHistory, HistoryRow
from statekeeper.ops.drill.quality import strip_remote_assets
from statekeeper.ops.drill.record import (
    CheckResult,
    DrillRecord,
    StoreDrill,
    format_mismatch,
)
from statekeeper.ops.drill.report_html import render_report, rto_trend_svg
from statekeeper.settings import load_settings
from statekeeper.stores.builders import Stores


def _int(n: int) -> bytes:
    return struct.pack(">q", n)


SPEC = Stores.persistent("totals").with_serdes("str", "int")


def test_a_diff_carries_both_values_of_its_example_keys():
    expected = {b"a": _int(1), b"b": _int(2), b"c": _int(3)}
    actual = {b"a": _int(1), b"b": _int(5), b"d": _int(4)}
    diff = diff_contents(expected, actual)
    assert diff.examples == [b"b", b"c", b"d"]  # differing values first
    assert diff.example_values == [(_int(2), _int(5)), (_int(3), None), (None, _int(4))]

    rows = mismatches(SPEC, diff, expected_as="recomputed", live={b"b": _int(2), b"c": None})
    assert rows == [
        {"key": "b", "restored": "5", "recomputed": "2", "live": "2"},
        {"key": "c", "restored": None, "recomputed": "3", "live": None},
        {"key": "d", "restored": "4", "recomputed": None, "live": None},
    ]
    # Without a live copy the side is left out (not known), not shown absent.
    assert "live" not in mismatches(SPEC, diff, expected_as="recomputed")[0]
    assert show_value(SPEC, b"\x01") == repr(b"\x01")  # does not decode: its bytes


def test_diff_result_passes_or_fails_with_keys_counts_and_values():
    same = diff_contents({b"a": _int(1)}, {b"a": _int(1)})
    ok = diff_result(SPEC, same, "x", expected_as="recomputed", passed="1 keys equal")
    assert (ok.status, ok.detail, ok.mismatches) == ("pass", "1 keys equal", [])

    diff = diff_contents({b"a": _int(1)}, {b"a": _int(7)})
    bad = diff_result(SPEC, diff, "the recomputation", expected_as="recomputed", passed="-")
    assert bad.status == "fail" and bad.examples == ["a"]
    assert bad.counts == {"missing": 0, "unexpected": 0, "differ": 1}
    assert bad.mismatches == [{"key": "a", "restored": "7", "recomputed": "1"}]
    assert bad.mismatch_lines() == ["a: restored 7, recomputed 1"]
    assert (
        format_mismatch({"key": "k", "live": None, "restored": "1", "recomputed": "2"})
        == "k: restored 1, recomputed 2, live absent"
    )


def test_check_results_of_older_callers_and_records_still_work():
    # The consistency check builds results positionally, without values.
    result = CheckResult("fail", "1 key(s) with other values", ["user-7"], {"differ": 1})
    assert result.mismatches == [] and result.mismatch_lines() == []
    # A record written before values, errors and committed records existed.
    old = {
        "drill_id": "d0",
        "app": "shop",
        "started_at": "2026-11-20T00:00:00+00:00",
        "passed": False,
        "checks": {},
        "failures": [],
        "stores": [
            {
                "task": "0_0",
                "store": "totals",
                "kind": "rocksdb",
                "source": "snapshot",
                "checks": {"truth": {"status": "fail", "detail": "d", "examples": ["k"]}},
            }
        ],
    }
    record = DrillRecord.from_dict(old)
    assert record.error is None and record.status == "fail"
    assert record.stores[0].checks["truth"].mismatches == []
    assert record.stores[0].committed_records_behind is None


def _store(ok: bool = True) -> StoreDrill:
    store = StoreDrill(task="0_0", store="totals", kind="rocksdb", source="snapshot")
    store.committed_records_behind, store.snapshot_age_s = 12, 30.0
    if ok:
        store.checks["truth"] = CheckResult("pass", "equal")
    else:
        store.checks["truth"] = CheckResult(
            "fail",
            "2 key(s) with other values",
            ["user-7", "user-9"],
            {"differ": 1, "missing": 1, "unexpected": 0},
            [
                {"key": "user-7", "restored": "999", "recomputed": "8", "live": "8"},
                {"key": "user-9", "restored": None, "recomputed": "4", "live": "4"},
            ],
        )
    return store


def _record(drill_id: str, *, error: str | None = None, ok: bool = True) -> DrillRecord:
    return DrillRecord(
        drill_id=drill_id,
        app="shop",
        started_at=f"2026-11-25T0{drill_id[-1]}:00:00+00:00",
        finished_at="2026-11-25T09:00:00+00:00",
        report_dir="/reports/x",
        error=error,
        rto_s=1.0,
        committed_records_behind=12,
        snapshot_age_s=30.0,
        stores=[_store(ok)],
    )


def test_an_errored_drill_is_an_error_whatever_its_stores_say():
    record = _record("d1", error="no snapshot 'x'")
    assert record.status == "error" and record.passed is False
    assert record.failures() == ["error: no snapshot 'x'"]
    data = record.as_dict()
    assert data["status"] == "error" and data["passed"] is False
    assert DrillRecord.from_dict(data).as_dict() == data
    assert DrillRecord("d", "a", "t", error="broker down").failures() == ["error: broker down"]
    assert _record("d2").status == "pass" and _record("d3", ok=False).status == "fail"


def test_history_keeps_errored_drills_and_upgrades_an_older_table(tmp_path):
    path = tmp_path / "history.sqlite"
    with sqlite3.connect(path) as conn:  # the table as the first drills wrote it
        conn.execute(
            "CREATE TABLE drills (drill_id TEXT PRIMARY KEY, app TEXT NOT NULL, started_at TEXT "
            "NOT NULL, finished_at TEXT NOT NULL, passed INTEGER NOT NULL, rto_s REAL NOT NULL, "
            "wall_s REAL NOT NULL, snapshot_age_s REAL, source_records_behind INTEGER NOT NULL,"
            " records_replayed INTEGER NOT NULL, bytes_downloaded INTEGER NOT NULL, report_dir "
            "TEXT NOT NULL, record_json TEXT NOT NULL)"
        )
        conn.execute(
            "INSERT INTO drills VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            ("d1", "shop", "2026-11-25T01:00:00", "", 1, 1.0, 2.0, None, 0, 0, 0, "/r", "{}"),
        )
    conn.close()
    history = DrillHistory(path)
    history.append(_record("d2", error="broker down"))
    history.append(_record("d3", ok=False))
    rows = history.rows("shop")
    assert [(r.drill_id, r.outcome) for r in rows] == [
        ("d1", "pass"),  # an older row: derived from passed
        ("d2", "error"),
        ("d3", "fail"),
    ]
    assert history.record("d2").error == "broker down"
    assert HistoryRow("d", "a", "t", False, 1.0, 1.0, 0, "/r").outcome == "fail"


def test_report_leads_rpo_with_committed_records_and_shows_values():
    html = render_report(_record("d2", ok=False), [])
    rpo = html.index("Recovery point (RPO)")
    committed = html.index("Committed records behind the live head")
    age = html.index("Snapshot age")
    assert rpo < committed < age < html.index("Recovery time (RTO)")
    table = html[html.index("Mismatching keys") :]
    assert "<th>Restored</th><th>Recomputed</th><th>Live</th>" in table
    assert "999" in table and '<span class="absent">absent</span>' in table
    assert "(2 of 2 key(s))" in table
    # A side no mismatch knows is no column; one only some know shows "not known".
    store = _store(ok=False)
    store.checks["truth"].mismatches = [{"key": "k", "restored": "1", "recomputed": "2"}]
    record = _record("d3")
    record.stores = [store]
    html = render_report(record, [])
    assert "<th>Live</th>" not in html and "not known" not in html
    store.checks["truth"].mismatches.append(
        {"key": "j", "restored": "1", "recomputed": "2", "live": "2"}
    )
    assert "not known" in render_report(record, [])


def test_report_and_trend_show_an_errored_drill():
    record = _record("d2", error="RuntimeError: boom")
    rows = [
        HistoryRow("d1", "shop", "2026-11-25T01:00:00", True, 1.0, 2.0, 10, "/r/1", "pass"),
        HistoryRow("d2", "shop", "2026-11-25T02:00:00", False, 0.0, 1.0, 0, "/r/2", "error"),
    ]
    html = render_report(record, rows)
    assert 'class="banner error"' in html and "ERROR" in html
    assert "The drill could not finish" in html and "RuntimeError: boom" in html
    svg = rto_trend_svg(rows)
    assert svg.count("<circle") == 2 and "#d98200" in svg and "d2 error" in svg


REMOTE = re.compile(
    r"<(?:script|link|img|iframe|source|embed|video|audio)\b[^>]*\b(?:src|href|srcset)\s*=\s*"
    r"[\"']?(?:https?:)?//|url\(\s*[\"']?(?:https?:)?//|@import\s+[\"']?(?:https?:)?//",
    re.I,
)


def test_remote_assets_are_stripped_from_a_page():
    page = """<html><head>
<link rel="stylesheet" href="https://cdn.example/bootstrap.min.css"/>
<link rel="stylesheet" type="text/css" href="//cdn.example/x.css">
<link rel="shortcut icon" href="./static/images/favicon.ico">
<style>@import url("https://fonts.example/a.css"); .x{background:url(http://img.example/b.png)}
.y{background:url(static/ok.png)}</style>
<script src="https://code.example/jquery.min.js"></script>
<script>$(".x").modal();</script>
</head><body>
<img class="NO-CACHE" src="https://assets.example/logo-long.png?d=1" alt="Great Expectations"/>
<img src="https://assets.example/chart.png" alt="chart">
<a href="https://greatexpectations.io">Great Expectations</a>
<table><tr><td>kept</td></tr></table>
</body></html>"""
    assert len(REMOTE.findall(page)) == 7
    out = strip_remote_assets(page, logo="../static/images/logo-long.png")
    assert REMOTE.findall(out) == []
    assert "<script" not in out  # inline scripts need the libraries that are gone
    assert 'href="./static/images/favicon.ico"' in out and "url(static/ok.png)" in out
    assert '<img src="../static/images/logo-long.png" alt="Great Expectations">' in out
    assert "chart" in out and '<a href="https://greatexpectations.io">' in out  # a link stays
    assert "<td>kept</td>" in out and out.index("<style>body{") < out.index("</head>")
    assert strip_remote_assets(out) == out  # a page stripped before stays as it is


def test_live_values_need_a_local_copy(tmp_path):
    settings = load_settings(state_dir=tmp_path, application_id="shop")
    assert live_values(settings, "0_0", SPEC, [b"a"]) is None  # never ran here
    assert live_values(settings, "0_0", SPEC, []) is None
    memory = Stores.in_memory("recent")
    assert live_values(settings, "0_0", memory, [b"a"]) is None  # no files to read
