"""``statekeeper snapshot create|list|verify|prune`` against a stopped app's local state."""

from __future__ import annotations

import json
from pathlib import Path

from statekeeper.cli import main

from .spec_apps import spec_app_with_state


def _app_with_state(admin, broker, tmp_path: Path) -> tuple[Path, str]:
    snaps = (tmp_path / "snaps").as_uri()
    return spec_app_with_state(
        admin,
        broker,
        tmp_path,
        prefix="snapcli",
        entries=50,
        batch_id=3,
        extra_settings=f", snapshot_url: '{snaps}'",
    )


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_snapshot_cli_create_list_verify_prune(admin, broker, tmp_path, capsys) -> None:
    spec, app_id = _app_with_state(admin, broker, tmp_path)
    assert main(["snapshot", "create", "--app", str(spec), "--json"]) == 0
    created = _json(capsys)
    # Identical files (OPTIONS, CURRENT, empty logs) of different stores are stored once.
    assert 0 < created["bytes_uploaded"] <= created["bytes_total"]
    snaps = created["snapshots"]
    # Every store of the task, the internal task-state store (stream time) included.
    assert {(s["task"], s["store"]) for s in snaps} == {
        (t, s) for t in ("0_0", "0_1") for s in ("totals", "windows", "sk-task-state-0")
    }
    assert all(s["batch_id"] == 3 for s in snaps)
    # key_count counts the inner store's raw keys: a window store keeps a bookkeeping key.
    assert all(s["key_count"] == 50 for s in snaps if s["store"] == "totals")
    assert all(s["key_count"] >= 50 for s in snaps if s["store"] == "windows")

    assert main(["snapshot", "create", "--app", str(spec), "--task", "0_1", "--json"]) == 0
    again = _json(capsys)
    assert len(again["snapshots"]) == 3
    assert again["bytes_uploaded"] < again["bytes_total"]  # unchanged SSTs are referenced

    argv = ["--app", str(spec), "--json"]
    assert main(["snapshot", "list", *argv, "--store", "totals"]) == 0
    assert len(_json(capsys)["snapshots"]) == 3
    assert main(["snapshot", "verify", *argv]) == 0
    assert _json(capsys)["ok"] is True
    assert main(["snapshot", "prune", *argv, "--keep", "1"]) == 0
    pruned = _json(capsys)
    assert len(pruned["kept"]) == 6 and len(pruned["deleted_snapshots"]) == 3
    assert main(["snapshot", "verify", *argv]) == 0


def test_snapshot_cli_bad_input(tmp_path, capsys) -> None:
    url = (tmp_path / "snaps").as_uri()
    # An empty catalog is no error: a new app has no snapshot until its first interval.
    assert main(["snapshot", "list", "--app", "no-such-app", "--url", url]) == 0
    assert "no snapshots yet of app 'no-such-app'" in capsys.readouterr().out
    assert main(["snapshot", "verify", "--app", "no-such-app", "--url", url, "--json"]) == 0
    empty = _json(capsys)
    assert empty["ok"] is True and empty["snapshots"] == [] and "no snapshots yet" in empty["note"]
    assert main(["snapshot", "create", "--app", "no-such-app", "--url", url]) == 2
    assert "needs the app spec" in capsys.readouterr().err
    assert main(["snapshot", "prune", "--app", "no-such-app", "--url", url]) == 2
    assert "--keep" in capsys.readouterr().err
