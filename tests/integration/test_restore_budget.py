"""``statekeeper audit changelogs --restore-time-budget S [--snapshot-over-budget]``: the
forecast against the budget, and a snapshot of the stopped app when it is over (test_drill's
live app: two committed batches per task, a snapshot after the first, so a tail remains)."""

from __future__ import annotations

import json
from pathlib import Path

from statekeeper.app.stored_snapshots import newest_stored_snapshots
from statekeeper.cli import main
from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotStorage, list_snapshots

from .test_drill import _live_app


def _audit(capsys, spec: Path, *extra: str) -> dict:
    capsys.readouterr()
    code = main(["audit", "changelogs", "--app", str(spec), "--json", *extra])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    return out["restore_budget"]


def test_audit_snapshots_a_stopped_app_over_its_restore_budget(admin, broker, tmp_path, capsys):
    app = _live_app(admin, broker, tmp_path)
    storage = SnapshotStorage((tmp_path / "snaps").as_uri(), app.app_id)
    before = {m.snapshot_id for m in list_snapshots(storage)}

    assert _audit(capsys, app.spec) is None  # no budget in the settings: no check
    # Over the budget, but only checked: nothing is taken without --snapshot-over-budget.
    checked = _audit(capsys, app.spec, "--restore-time-budget", "1e-9")
    assert checked["over_budget"] and checked["snapshot"] is None
    assert 0 < checked["forecast_restore_s"] < checked["full_replay_s"]  # a tail, not all
    within = _audit(capsys, app.spec, "--restore-time-budget", "3600", "--snapshot-over-budget")
    assert not within["over_budget"] and within["snapshot"] is None
    assert {m.snapshot_id for m in list_snapshots(storage)} == before

    taken = _audit(capsys, app.spec, "--restore-time-budget", "1e-9", "--snapshot-over-budget")
    assert taken["over_budget"] and taken["snapshot"]["running"] is False
    new = [m for m in list_snapshots(storage) if m.snapshot_id not in before]
    assert sorted(taken["snapshot"]["snapshot_ids"]) == sorted(m.snapshot_id for m in new)
    assert {(m.task, m.batch_id) for m in new} == {("0_0", 1), ("0_1", 1)}
    # The snapshot cut the tail: the next audit finds the app within the same budget.
    after = _audit(capsys, app.spec, "--restore-time-budget", "1e-9", "--snapshot-over-budget")
    assert after["forecast_restore_s"] == 0 and not after["over_budget"]
    assert after["snapshot"] is None

    # What a restarted app reads for its snapshot age: per task, its stores' newest.
    settings = load_settings(
        application_id=app.app_id, snapshot_url=storage.url, state_dir=app.state_dir
    )
    stored = newest_stored_snapshots(settings)
    assert sorted(stored) == ["0_0", "0_1"]
    assert {s["snapshot_id"] for s in stored.values()} <= set(taken["snapshot"]["snapshot_ids"])
    newest = {m.task: m.created.timestamp() for m in new}
    assert all(s["created_at_s"] <= newest[t] for t, s in stored.items())
    missing = load_settings(application_id="none", snapshot_url=(tmp_path / "no").as_uri())
    assert newest_stored_snapshots(missing) == {}


def test_a_budget_must_be_given_and_positive(tmp_path, capsys):
    spec = tmp_path / "app.yaml"
    spec.write_text("application_id: x\ntopology: nowhere.py:build\n")
    audit = ["audit", "changelogs", "--app", str(spec)]
    assert main([*audit, "--restore-time-budget", "0"]) != 0
    assert "--restore-time-budget must be > 0 seconds, got 0.0" in capsys.readouterr().err
    assert main([*audit, "--snapshot-over-budget"]) != 0
    assert "--snapshot-over-budget needs a budget" in capsys.readouterr().err
