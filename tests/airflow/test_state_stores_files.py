"""Which files the State stores app serves from a drill's report directory (no server)."""

from __future__ import annotations

import pytest
from fastapi import HTTPException

from statekeeper.airflow.plugin.web_app import report_file


def test_only_regular_files_inside_the_report_directory_are_served(tmp_path):
    report = tmp_path / "drills" / "app" / "d1"
    (report / "data_docs").mkdir(parents=True)
    (report / "report.html").write_text("r")
    (report / "data_docs" / "index.html").write_text("d")
    (report / ".sandbox-d1").mkdir()
    (report / ".sandbox-d1" / "state").write_text("s")
    (tmp_path / "drills" / "history.sqlite").write_text("h")
    (report / "escape.html").symlink_to(tmp_path / "drills" / "history.sqlite")

    assert report_file(report, "report.html") == (report / "report.html").resolve()
    assert report_file(report, "data_docs/index.html").name == "index.html"
    refused_paths = (
        "../../history.sqlite",
        "data_docs/../../../history.sqlite",
        "/etc/passwd",
        ".sandbox-d1/state",  # a kept sandbox: live-like state, not a report
        "escape.html",  # a symlink out of the directory
        "data_docs",  # a directory
        "missing.html",
        "",
    )
    for refused in refused_paths:
        with pytest.raises(HTTPException) as raised:
            report_file(report, refused)
        assert raised.value.status_code == 404, refused


def test_nul_control_and_invalid_characters_are_404_not_an_exception(tmp_path):
    from statekeeper.airflow.plugin.web_app import is_clean, require_clean

    report = tmp_path / "d1"
    report.mkdir()
    (report / "report.html").write_text("r")
    for bad in (
        "report\x00.html",
        "\x00",
        "report.html\x00",
        "data_docs\x00/index.html",
        "\x01report.html",
        "report\x7f.html",
        "report\ufffd.html",  # bytes that were not UTF-8
        "report\udcff.html",  # a lone surrogate (surrogateescape)
        "x" * 5000,  # longer than a file name may be
    ):
        with pytest.raises(HTTPException) as raised:
            report_file(report, bad)
        assert raised.value.status_code == 404, repr(bad)
    assert is_clean("word-count") and is_clean("données/rapport é.html")
    assert not is_clean("a\x00b") and not is_clean("a\nb") and not is_clean("\x9b")
    require_clean("word-count", "d1", "report.html")
    with pytest.raises(HTTPException) as raised:
        require_clean("word-count", "d1\x00", "report.html")
    assert raised.value.status_code == 404
