"""``statekeeper snapshot create|list|verify|prune`` against a stopped app's local state."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from statekeeper.cli import main
from statekeeper.kafka.admin import ensure_topic
from statekeeper.settings import load_settings
from statekeeper.state.environment import StateEnvironment

from .test_changelog_audit import TOPOLOGY_FILE, _topology


def _app_with_state(admin, broker, tmp_path: Path) -> tuple[Path, str]:
    app_id = f"snapcli-{uuid.uuid4().hex[:8]}"
    source = f"{app_id}-input"
    ensure_topic(admin, source, 2)
    (tmp_path / "topo.py").write_text(TOPOLOGY_FILE)
    state_dir = tmp_path / "state"
    spec = tmp_path / "app.yaml"
    spec.write_text(
        f"application_id: {app_id}\ntopology: topo.py:build\n"
        f"params: {{input_topic: {source}}}\n"
        f"settings: {{bootstrap_servers: '{broker.bootstrap_servers}', state_dir: '{state_dir}',"
        f" snapshot_url: '{(tmp_path / 'snaps').as_uri()}'}}\n"
    )
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers, state_dir=state_dir, application_id=app_id
    )
    specs = _topology(source).store_specs(0)
    env = StateEnvironment(settings)
    env.ensure_changelogs(specs, 2)
    try:
        for partition in range(2):
            with env.task(f"0_{partition}", partition, specs) as task:
                for i in range(50):
                    task.store("totals").put(f"user-{partition}-{i}", i)
                    task.store("windows").put(f"user-{partition}-{i}", i, 10_000)
                task.commit(3, {f"{source}:{partition}": 50})
    finally:
        env.close()
    return spec, app_id


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
    assert main(["snapshot", "list", "--app", "no-such-app", "--url", url]) == 2
    assert "no snapshots of app 'no-such-app'" in capsys.readouterr().err
    assert main(["snapshot", "create", "--app", "no-such-app", "--url", url]) == 2
    assert "needs the app spec" in capsys.readouterr().err
    assert main(["snapshot", "prune", "--app", "no-such-app", "--url", url]) == 2
    assert "--keep" in capsys.readouterr().err
