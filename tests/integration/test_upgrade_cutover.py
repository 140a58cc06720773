"""Cut-over and rollback against a real broker, no Spark: refusals before anything is
recorded, the migrated state read back and verified (and a wrong migration caught), the
upgrade history that makes one version active, and the rollback."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid

import pytest

from statekeeper.app.spec import load_app_spec
from statekeeper.app.topics import prepare_topics
from statekeeper.cli import main
from statekeeper.kafka.admin import ensure_topic
from statekeeper.migration import prepare_migration
from statekeeper.migration.functions import StoreMigration
from statekeeper.upgrade import UpgradeError, cutover, rollback, verify_migration
from statekeeper.upgrade.cutover import running_pid
from statekeeper.versions.history import active_override, read_history
from statekeeper.worker.task_runner import close_worker_services
from tests.integration.test_state_migration import (
    PARTITIONS,
    _produce_words,
    _run_v1,
    _settings,
    _write_specs,
)


@pytest.fixture
def versions(broker, admin, topic_name, tmp_path):
    """v1 (int counts) committed at batch 5 over a topic; v2 (JSON counts) not migrated."""
    ensure_topic(admin, topic_name, PARTITIONS)
    old_app, new_app = (f"cut-{v}-{uuid.uuid4().hex[:6]}" for v in ("v1", "v2"))
    v1_path, v2_path = _write_specs(tmp_path / "app", topic_name, old_app, new_app)
    sent = _produce_words(broker.bootstrap_servers, topic_name, 50, vocabulary=9)
    v1_spec = load_app_spec(v1_path)
    v1_settings = _settings(broker, tmp_path / "state", old_app)
    topology = v1_spec.build_topology()
    prepare_topics(admin, topology, old_app, 30.0)
    ends = [(0, sum(c.values())) for c in sent]
    _run_v1(v1_settings, topology, topic_name, 5, ends, snapshot="req-1")
    close_worker_services()
    return {
        "v1": (v1_spec, v1_settings, v1_path),
        "v2": (load_app_spec(v2_path), _settings(broker, tmp_path / "state", new_app), v2_path),
        "sent": sent,
        "roots": (tmp_path / "state" / old_app, tmp_path / "state" / new_app),
    }


def test_cutover_verifies_the_migrated_state_and_rollback_reactivates_the_old_version(
    versions, tmp_path
) -> None:
    (v1_spec, v1_settings, _), (v2_spec, v2_settings, _) = versions["v1"], versions["v2"]
    old_root, new_root = versions["roots"]
    report = cutover(v1_spec, v2_spec, v1_settings, v2_settings, scratch_root=tmp_path / "scratch")
    assert report.old_stop == "not running"
    assert report.verify is not None and report.verify.ok
    words = sum(len(c) for c in versions["sent"])
    totals = report.verify.totals()
    # Every count changed encoding (int -> {"count": n, "from": "v1"}): expected-different;
    # the task-state store was copied as it is: equal.
    assert totals["unexpected"] == 0 and totals["misaligned_tasks"] == 0
    assert totals["expected_different"] == words
    assert totals["equal"] >= PARTITIONS
    old, new = v1_settings.application_id, v2_settings.application_id
    assert [(e.kind, e.stage) for e in read_history(new_root)] == [
        ("cutover", "started"),
        ("cutover", "done"),
    ]
    assert read_history(old_root) == read_history(new_root)
    assert active_override(new_root, new)[0] is True
    assert active_override(old_root, old)[0] is False
    assert read_history(new_root)[-1].details["batch_base"] == 6

    event = rollback(v2_settings)
    assert (event.kind, event.from_app, event.to_app) == ("rollback", new, old)
    assert active_override(old_root, old)[0] is True
    assert active_override(new_root, new)[0] is False
    with pytest.raises(UpgradeError, match="rolled back to .* already"):
        rollback(v2_settings)


def test_a_wrong_migration_does_not_verify(versions, tmp_path) -> None:
    (v1_spec, v1_settings, _), (v2_spec, v2_settings, _) = versions["v1"], versions["v2"]
    cutover(v1_spec, v2_spec, v1_settings, v2_settings, verify=False)
    prepared = prepare_migration(v1_spec, v2_spec, v1_settings, v2_settings)
    wrong = StoreMigration(
        "counts", "record", lambda key, value: (key, {"count": value + 1}), "test:off_by_one"
    )
    job = dataclasses.replace(prepared.job, migrations={"counts": wrong})
    report = verify_migration(job, prepared.tasks, scratch_root=tmp_path / "scratch")
    assert not report.ok
    words = sum(len(c) for c in versions["sent"])
    assert report.totals()["unexpected"] == words
    examples = [e for t in report.tasks for e in t.stores["counts"].examples]
    assert examples and "expected {'count':" in examples[0] and "'from': 'v1'" in examples[0]


def test_a_running_old_version_is_refused_before_anything_is_recorded(versions) -> None:
    (v1_spec, v1_settings, _), (v2_spec, v2_settings, _) = versions["v1"], versions["v2"]
    status = v1_settings.status_path()
    status.parent.mkdir(parents=True, exist_ok=True)
    status.write_text(json.dumps({"state": "RUNNING", "pid": os.getpid()}))
    with pytest.raises(UpgradeError, match=rf"is running \(pid {os.getpid()}\).*--stop-old"):
        cutover(v1_spec, v2_spec, v1_settings, v2_settings)
    assert read_history(versions["roots"][0]) == []
    # A status whose app started before this process did names a pid reused since.
    status.write_text(json.dumps({"state": "RUNNING", "pid": os.getpid(), "started_at": 1.0}))
    assert running_pid(v1_settings) is None
    with pytest.raises(UpgradeError, match="nothing to roll back"):
        rollback(v2_settings)


def test_the_commands(versions, broker, tmp_path, capsys) -> None:
    (_, v1_settings, v1_path), (_, v2_settings, v2_path) = versions["v1"], versions["v2"]
    common = ["--bootstrap", broker.bootstrap_servers, "--set", f"state_dir={tmp_path / 'state'}"]
    common += ["--set", f"checkpoint_dir={tmp_path / 'ckpt'}"]
    code = main(
        ["upgrade", "cutover", "--app", str(v2_path), "--from", str(v1_path), "--local"] + common
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "cut over in" in out.out and "0 unexpected" in out.out
    assert "takes over at batch 6" in out.out
    code = main(["upgrade", "history", "--app", str(v2_path), "--json"] + common)
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["active"] is True and len(doc["events"]) == 2
    code = main(["upgrade", "rollback", "--app", str(v2_path)] + common)
    out = capsys.readouterr()
    assert code == 0 and f"rolled back to {v1_settings.application_id}" in out.out
    code = main(["upgrade", "rollback", "--app", str(v2_path)] + common)
    err = capsys.readouterr().err
    assert code == 2 and "already" in err and "Traceback" not in err
    assert v2_settings.application_id in err
