"""``dag.test()`` of the snapshot, drill and audit DAGs against the embedded broker.

The app is test_drill's live app (a 2-partition source run for two committed batches, with
a snapshot after the first), stopped, with its spec alone in a specs folder the DAGs are
pointed at through STATEKEEPER_SPECS_DIR. An app with no committed state yet (right after
``make up``) has its snapshot and drill tasks skipped, not failed.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import pytest

from statekeeper.changelog.records import changelog_topic
from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotStorage, list_snapshots
from statekeeper.state.environment import StateEnvironment
from tests.integration.test_changelog_audit import GRACE, SIZE, _set_config, _topology
from tests.integration.test_drill import _live_app, _write_spec

# Its module-scoped fixtures run once: the whole module goes to one xdist worker.
pytestmark = pytest.mark.xdist_group("dag_runs")


def _dag(dag_file: str, dag_id: str):
    """The DAG parsed from dags/ now (the specs folder is read at parse time)."""
    from airflow.dag_processing.dagbag import DagBag

    from .conftest import DAGS

    bag = DagBag(dag_folder=DAGS / dag_file)
    assert bag.import_errors == {}
    return bag.dags[dag_id]


def _run(dag, **conf):
    """Run the DAG once; returns (dag run, {task id: state}, seconds)."""
    started = time.perf_counter()
    run = dag.test(run_conf=conf or None)
    seconds = time.perf_counter() - started
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    print(f"dag.test({dag.dag_id}, {conf}): {run.state} in {seconds:.1f} s")
    return run, states, seconds


@pytest.fixture(scope="module")
def live_app(airflow_db, admin, broker, tmp_path_factory, request):
    """The live app's spec in a specs folder of its own, for DAGs parsed in this module."""
    specs = tmp_path_factory.mktemp("specs")
    (specs / "app").mkdir()
    app = _live_app(admin, broker, specs / "app")
    monkey = pytest.MonkeyPatch()
    monkey.setenv("STATEKEEPER_SPECS_DIR", str(specs))
    request.addfinalizer(monkey.undo)
    return app


@pytest.fixture(scope="module")
def snapshotted(live_app):
    """The snapshot DAG run once on the stopped app."""
    storage = SnapshotStorage((live_app.spec.parent / "snaps").as_uri(), live_app.app_id)
    before = {m.snapshot_id for m in list_snapshots(storage)}
    run, states, _ = _run(_dag("statekeeper_snapshots.py", "statekeeper_snapshots"))
    return run, states, storage, before


# Runs before the snapshot DAG's test (file order): the live app's newest snapshot is still
# the one after its first batch, so its forecast restore replays the second batch's tail.
def test_audit_dag_snapshots_an_app_over_its_restore_time_budget(live_app):
    audit = _dag("statekeeper_changelog_audit.py", "statekeeper_changelog_audit")
    task_id = f"audit_{live_app.app_id}"
    storage = SnapshotStorage((live_app.spec.parent / "snaps").as_uri(), live_app.app_id)
    before = {m.snapshot_id for m in list_snapshots(storage)}

    def audit_with(budget_s):
        run, states, _ = _run(audit, restore_time_budget_s=budget_s)
        assert run.state == "success" and states == {task_id: "success"}
        [ti] = run.get_task_instances()
        return ti, ti.xcom_pull(task_ids=task_id)["restore_budget"]

    _, large = audit_with(3600.0)
    assert large["budget_s"] == 3600.0 and 0 < large["forecast_restore_s"] < 3600.0
    assert not large["over_budget"] and large["snapshot"] is None
    assert {m.snapshot_id for m in list_snapshots(storage)} == before

    ti, tiny = audit_with(1e-9)  # any tail is over this budget
    assert tiny["over_budget"] and tiny["snapshot"]["running"] is False
    new = [m for m in list_snapshots(storage) if m.snapshot_id not in before]
    assert sorted(tiny["snapshot"]["snapshot_ids"]) == sorted(m.snapshot_id for m in new)
    # Every task and store, at the app's last commit (batch 1): the tail is gone.
    assert all(m.batch_id == 1 for m in new)
    assert {(m.task, m.store, m.batch_id) for m in new} >= {
        (t, s, 1) for t in ("0_0", "0_1") for s in ("totals", "windows")
    }
    assert ti.xcom_pull(task_ids=task_id, key="snapshot_ids") == tiny["snapshot"]["snapshot_ids"]

    # The fresh snapshot cut the forecast to nothing: the same budget takes no other one.
    _, again = audit_with(1e-9)
    assert again["forecast_restore_s"] == 0 and again["full_replay_s"] > 0
    assert not again["over_budget"] and again["snapshot"] is None
    assert len(list_snapshots(storage)) == len(before) + len(new)


def test_snapshot_dag_snapshots_verifies_and_publishes(live_app, snapshotted):
    run, states, storage, before = snapshotted
    assert run.state == "success", states
    assert states == {f"snapshot_{live_app.app_id}": "success"}
    after = list_snapshots(storage)
    new = [m for m in after if m.snapshot_id not in before]
    # One new snapshot per task and store, at the app's last committed batch (1).
    assert {(m.task, m.store) for m in new} >= {
        (t, s) for t in ("0_0", "0_1") for s in ("totals", "windows")
    }
    assert all(m.batch_id == 1 for m in new)
    [ti] = run.get_task_instances()
    pushed = ti.xcom_pull(task_ids=ti.task_id, key="snapshot_ids")
    assert sorted(pushed) == sorted(m.snapshot_id for m in new)


def test_drill_dag_passes_then_fails_on_a_damaged_snapshot(live_app, snapshotted):
    drill = _dag("statekeeper_restore_drill.py", "statekeeper_restore_drill")
    task_id = f"drill_{live_app.app_id}"
    run, states, _ = _run(drill)
    assert run.state == "success" and states == {task_id: "success"}
    reports = sorted((live_app.state_dir / ".drills" / live_app.app_id).glob("*/report.html"))
    assert len(reports) == 1

    # Damage the newest snapshot of 0_0 totals: its drill must fail, not restore quietly.
    _, _, storage, _ = snapshotted
    manifest = list_snapshots(storage, "0_0", "totals")[-1]
    sst = max((f for f in manifest.files if f.name.endswith(".sst")), key=lambda f: f.size)
    target = Path(storage.shared_path(sst.sha256))
    target.write_bytes(b"x" + target.read_bytes()[1:])
    run, states, _ = _run(drill)
    assert run.state == "failed" and states == {task_id: "failed"}


def test_audit_dag_fails_on_a_wrong_config_and_fix_corrects_it(live_app, admin):
    topic = changelog_topic(live_app.app_id, "windows")
    _set_config(admin, topic, "retention.ms", str(SIZE + GRACE - 1))  # below the window's span
    audit = _dag("statekeeper_changelog_audit.py", "statekeeper_changelog_audit")
    task_id = f"audit_{live_app.app_id}"
    run, states, _ = _run(audit)
    assert run.state == "failed" and states == {task_id: "failed"}
    run, states, _ = _run(audit, fix=True)
    assert run.state == "success" and states == {task_id: "success"}
    [ti] = run.get_task_instances()
    report = ti.xcom_pull(task_ids=task_id)
    assert report["verdict"] == "ok"
    assert [(c["topic"], c["key"]) for c in report["applied"]] == [(topic, "retention.ms")]


def test_snapshot_and_drill_skip_an_app_with_no_committed_state(
    airflow_db, admin, broker, tmp_path, monkeypatch
):
    """Right after ``make up`` the DAGs run before the apps have state: never ran, then
    started with no batch committed. Nothing to snapshot or drill: skipped, not failed."""
    app_id = f"fresh-{uuid.uuid4().hex[:8]}"
    source = f"{app_id}-input"
    folder = tmp_path / "specs" / "app"
    folder.mkdir(parents=True)
    snaps = tmp_path / "snaps"
    _write_spec(folder, app_id, source, broker, f", snapshot_url: '{snaps.as_uri()}'")
    monkeypatch.setenv("STATEKEEPER_SPECS_DIR", str(folder.parent))
    dags = {
        f"snapshot_{app_id}": _dag("statekeeper_snapshots.py", "statekeeper_snapshots"),
        f"drill_{app_id}": _dag("statekeeper_restore_drill.py", "statekeeper_restore_drill"),
    }

    def all_skipped():
        for task_id, dag in dags.items():
            run, states, _ = _run(dag)
            assert run.state == "success" and states == {task_id: "skipped"}, states

    all_skipped()  # never ran: no state directory at all
    assert not (folder / "state" / app_id).exists()

    # Started, no batch committed yet: every task opened its state (a .checkpoint file
    # without a batch id), as a running app's tasks do at their first batch.
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        state_dir=folder / "state",
        application_id=app_id,
    )
    specs = _topology(source).store_specs(0)
    env = StateEnvironment(settings)
    try:
        env.ensure_changelogs(specs, 2)
        for partition in (0, 1):
            with env.task(f"0_{partition}", partition, specs):
                pass
    finally:
        env.close()
    assert (folder / "state" / app_id / "0_1" / ".checkpoint").is_file()
    all_skipped()
    assert list_snapshots(SnapshotStorage(snaps.as_uri(), app_id, create=True)) == []


def test_drill_dag_fails_for_committed_state_without_a_snapshot(live_app, tmp_path, monkeypatch):
    """The live app (committed state) pointed at an empty snapshot storage: a real gap, so
    its drill fails rather than being skipped."""
    folder = tmp_path / "specs" / "gap"
    folder.mkdir(parents=True)
    shutil.copy(live_app.spec.parent / "topo.py", folder / "topo.py")
    snaps = (live_app.spec.parent / "snaps").as_uri()
    text = live_app.spec.read_text()
    assert snaps in text
    (folder / live_app.spec.name).write_text(text.replace(snaps, (tmp_path / "empty").as_uri()))
    monkeypatch.setenv("STATEKEEPER_SPECS_DIR", str(folder.parent))
    drill = _dag("statekeeper_restore_drill.py", "statekeeper_restore_drill")
    run, states, _ = _run(drill)
    assert run.state == "failed" and states == {f"drill_{live_app.app_id}": "failed"}
