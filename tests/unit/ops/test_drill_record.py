"""Pure pieces of restore drills: the record, the SQLite history, the HTML report, content
diffs and the rows the data-quality suite validates."""

from __future__ import annotations

import sqlite3
import struct

import pytest

from statekeeper.ops.drill.contents import diff_contents, show_key
from statekeeper.ops.drill.history import DrillHistory, HistoryRow
from statekeeper.ops.drill.integrity import check_integrity
from statekeeper.ops.drill.quality import store_rows
from statekeeper.ops.drill.record import CheckResult, DrillRecord, StoreDrill
from statekeeper.ops.drill.report_html import render_report, rto_trend_svg
from statekeeper.ops.drill.sandbox import RestoredStore, RestoredTask
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import Stores
from statekeeper.stores.window_bytes import changelog_window_key


def _record(drill_id: str, app: str = "shop", *, ok: bool = True, rto: float = 1.5) -> DrillRecord:
    store = StoreDrill(task="0_0", store="totals", kind="rocksdb", source="snapshot")
    store.checks["integrity"] = CheckResult("pass", "verified")
    store.checks["truth"] = (
        CheckResult("pass", "equal")
        if ok
        else CheckResult("fail", "1 key(s) with other values", ["user-7"], {"differ": 1})
    )
    return DrillRecord(
        drill_id=drill_id,
        app=app,
        started_at=f"2026-11-25T0{drill_id[-1]}:00:00+00:00",
        finished_at="2026-11-25T09:00:00+00:00",
        report_dir="/reports/x",
        data_docs_index="/reports/x/data_docs/index.html",
        rto_s=rto,
        stores=[store],
    )


def test_record_verdict_failures_and_round_trip():
    assert DrillRecord("d", "a", "t").passed is False  # nothing restored proves nothing
    assert _record("d1").passed is True
    bad = _record("d2", ok=False)
    assert bad.passed is False
    assert bad.check_status("truth") == "fail" and bad.check_status("integrity") == "pass"
    assert bad.check_status("quality") == "skipped"
    assert bad.failures() == ["0_0 totals truth: 1 key(s) with other values keys: user-7"]
    data = bad.as_dict()
    assert data["passed"] is False and data["checks"]["truth"] == "fail"
    assert DrillRecord.from_dict(data).as_dict() == data


def test_history_keeps_rows_per_app_oldest_first(tmp_path):
    history = DrillHistory(tmp_path / "drills" / "history.sqlite")
    assert history.rows("shop") == []
    history.append(_record("d2", rto=2.0))
    history.append(_record("d1", rto=1.0, ok=False))
    history.append(_record("d3", app="other"))
    rows = history.rows("shop")
    assert [r.drill_id for r in rows] == ["d1", "d2"]  # by start time
    assert [r.passed for r in rows] == [False, True] and rows[1].rto_s == 2.0
    assert history.record("d1").failures() == _record("d1", ok=False).failures()
    assert history.record("missing") is None
    with pytest.raises(sqlite3.IntegrityError):
        history.append(_record("d2"))


def test_report_is_one_offline_page_with_trend_and_links():
    record = _record("d2", app="<shop>", ok=False)
    rows = [
        HistoryRow("d1", "<shop>", "2026-11-25T01:00:00", True, 1.0, 2.0, 10, "/r/1"),
        HistoryRow("d2", "<shop>", "2026-11-25T02:00:00", False, 3.0, 4.0, 20, "/r/2"),
    ]
    html = render_report(record, rows)
    assert "&lt;shop&gt;" in html and "<shop>" not in html
    assert html.count("<circle") == 2 and "<polyline" in html
    assert 'href="data_docs/index.html"' in html  # relative to the report directory
    assert "user-7" in html and "FAIL" in html
    assert "<script" not in html and "<link" not in html
    assert "No drills" in rto_trend_svg([])


def test_diff_contents_counts_and_caps_examples():
    expected = {f"k{i:02d}".encode(): b"1" for i in range(30)}
    actual = dict(expected)
    actual[b"k00"] = b"2"
    del actual[b"k01"]
    actual[b"zz"] = b"1"
    diff = diff_contents(expected, actual)
    assert diff.counts() == {"missing": 1, "unexpected": 1, "differ": 1}
    assert diff.examples == [b"k00", b"k01", b"zz"]
    assert diff_contents(expected, dict(expected)).equal
    many = diff_contents(expected, {})
    assert many.missing == 30 and len(many.examples) == 20


def test_rows_flag_what_does_not_decode():
    spec = Stores.window("w", size_ms=10, retention_ms=100).with_serdes("str", "int")
    good = changelog_window_key(b"user", 20)
    store = RestoredStore(
        spec=spec,
        contents={good: struct.pack(">q", 3), changelog_window_key(b"\xff", 30): b"bad"},
        metadata=StoreMetadata(),
        source="snapshot",
    )
    rows = sorted(store_rows(store), key=lambda r: r["window_start"])
    assert rows[0] == {
        "window_start": 20,
        "window_end": 30,
        "key": "user",
        "key_decodes": True,
        "value": 3,
        "value_decodes": True,
    }
    assert rows[1]["key"] is None and rows[1]["key_decodes"] is False
    assert rows[1]["value_decodes"] is False
    assert show_key(spec, good) == "user@20"


def _restored_task(*stores: RestoredStore) -> RestoredTask:
    return RestoredTask(
        "0_3", 0, 3, [s.spec for s in stores], {s.spec.name: s for s in stores}, 4, {}, 0.1
    )


def test_integrity_without_storage_checks_markers_and_batches():
    spec = Stores.persistent("totals")
    never = RestoredStore(spec=spec, contents={}, metadata=StoreMetadata(), source="full replay")
    assert check_integrity(_restored_task(never), never, None).status == "skipped"

    at4 = RestoredStore(spec, {}, StoreMetadata(10, 4, {}), "full replay")
    assert check_integrity(_restored_task(at4), at4, None).status == "pass"
    other = RestoredStore(Stores.persistent("other"), {}, StoreMetadata(7, 3, {}), "full replay")
    split = check_integrity(_restored_task(at4, other), at4, None)
    assert split.status == "fail" and "different batches" in split.detail
    skipped = RestoredStore(spec, {}, StoreMetadata(10, 4, {}), "full replay")
    skipped.fallbacks = [{"snapshot_id": "s1", "reason": "file x failed verification"}]
    bad = check_integrity(_restored_task(skipped), skipped, None)
    assert bad.status == "fail" and "snapshot s1 was skipped: file x" in bad.detail
