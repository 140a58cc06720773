"""``statekeeper stores list|inspect``: an app's local state, read-only, decoded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statekeeper.cli import main

from .spec_apps import spec_app_with_state


@pytest.fixture
def app_with_state(admin, broker, tmp_path: Path):
    """A spec, and local state of two tasks written and committed through the state layer."""
    spec, _ = spec_app_with_state(
        admin, broker, tmp_path, prefix="stores", entries=5, batch_id=1, window_offset=100
    )
    return spec


def test_stores_list_shows_every_local_copy(app_with_state, capsys) -> None:
    assert main(["stores", "list", "--app", str(app_with_state), "--json"]) == 0
    copies = json.loads(capsys.readouterr().out)["stores"]
    by = {(c["store"], c["task"]): c for c in copies}
    assert {("totals", "0_0"), ("totals", "0_1"), ("windows", "0_0")} <= set(by)
    assert all(by[("totals", t)]["approx_entries"] >= 5 for t in ("0_0", "0_1"))
    assert main(["stores", "list", "--app", str(app_with_state)]) == 0
    assert "(approx)" in capsys.readouterr().out


def test_stores_inspect_by_key_prefix_and_window(app_with_state, capsys) -> None:
    argv = ["stores", "inspect", "--app", str(app_with_state), "--json"]
    assert main([*argv, "--store", "totals", "--key", "user-1-3"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    assert entries == [{"task": "0_1", "key": "user-1-3", "value": 3, "window_start": None}]

    assert main([*argv, "--store", "totals", "--prefix", "user-0-", "--limit", "3"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    assert len(entries) == 3 and all(e["key"].startswith("user-0-") for e in entries)

    assert main([*argv, "--store", "windows", "--prefix", "user-1-"]) == 0
    entries = json.loads(capsys.readouterr().out)["entries"]
    assert {(e["key"], e["window_start"], e["value"]) for e in entries} == {
        (f"user-1-{i}", 10_000, i + 100) for i in range(5)
    }

    assert main([*argv, "--store", "nope"]) == 2
    assert "no store 'nope'" in capsys.readouterr().err
