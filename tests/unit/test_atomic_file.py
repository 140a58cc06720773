"""replace_text: the new text or the old one, never a half-written file or a stray temp."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper import atomic_file
from statekeeper.atomic_file import replace_text


def test_writes_and_replaces_creating_the_folder(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "record.json"
    assert replace_text(path, "one") == path
    replace_text(path, "two", durable=True)
    assert path.read_text() == "two"
    assert sorted(p.name for p in path.parent.iterdir()) == ["record.json"]


def test_a_failed_write_keeps_the_old_text_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "record.json"
    replace_text(path, "old")

    def failing_replace(_src: object, _dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(atomic_file.os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        replace_text(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]
