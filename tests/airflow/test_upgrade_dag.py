"""The statekeeper_upgrade DAG with dag.test(): a cut-over of a real app state (embedded
broker, no Spark), then a rollback; a bad app id fails the step naming the apps there are."""

from __future__ import annotations

import uuid

import yaml

from statekeeper.app.spec import load_app_spec
from statekeeper.app.topics import prepare_topics
from statekeeper.kafka.admin import ensure_topic
from statekeeper.versions.history import active_override, read_history
from statekeeper.worker.task_runner import close_worker_services
from tests.integration.test_state_migration import (
    PARTITIONS,
    _produce_words,
    _run_v1,
    _settings,
    _write_specs,
)


def _upgrade_dag(specs, monkeypatch):
    monkeypatch.setenv("STATEKEEPER_SPECS_DIR", str(specs))
    from airflow.dag_processing.dagbag import DagBag

    from .conftest import DAGS

    bag = DagBag(dag_folder=DAGS / "statekeeper_upgrade.py")
    assert bag.import_errors == {}
    return bag.dags["statekeeper_upgrade"]


def _run(dag, **conf):
    run = dag.test(run_conf={"mode": "cutover", "from_app": "", "stop_old": True, **conf})
    return run.state, {ti.task_id: ti for ti in run.get_task_instances()}


def test_cutover_then_rollback_through_the_dag(
    airflow_db, broker, admin, topic_name, tmp_path, monkeypatch
) -> None:
    ensure_topic(admin, topic_name, PARTITIONS)
    old_app, new_app = (f"dag-{v}-{uuid.uuid4().hex[:6]}" for v in ("v1", "v2"))
    specs = tmp_path / "specs"
    v1_path, v2_path = _write_specs(specs / "app", topic_name, old_app, new_app)
    state = tmp_path / "state"
    settings = {
        "bootstrap_servers": broker.bootstrap_servers,
        "state_dir": str(state),
        "checkpoint_dir": str(tmp_path / "ckpt"),
        "status_port": None,
    }
    for path in (v1_path, v2_path):
        raw = yaml.safe_load(path.read_text())
        path.write_text(yaml.safe_dump({**raw, "settings": settings}))
    sent = _produce_words(broker.bootstrap_servers, topic_name, 20, vocabulary=5)
    v1 = load_app_spec(v1_path).build_topology()
    prepare_topics(admin, v1, old_app, 30.0)
    v1_settings = _settings(broker, state, old_app)
    _run_v1(v1_settings, v1, topic_name, 3, [(0, sum(c.values())) for c in sent])
    close_worker_services()

    dag = _upgrade_dag(specs, monkeypatch)
    run_state, tis = _run(dag, app=new_app, from_app=old_app)
    assert run_state == "success", {t: ti.state for t, ti in tis.items()}
    report = tis["upgrade"].xcom_pull(task_ids="upgrade")
    assert report["verify"]["ok"] and report["old_stop"] == "not running"
    assert tis["upgrade"].xcom_pull(task_ids="upgrade", key="launch_apps") == [new_app]
    assert tis["launch"].state == "success"
    assert active_override(state / new_app, new_app)[0] is True
    assert active_override(state / old_app, old_app)[0] is False

    run_state, tis = _run(dag, app=new_app, mode="rollback")
    assert run_state == "success"
    assert tis["upgrade"].xcom_pull(task_ids="upgrade", key="launch_apps") == [old_app]
    assert [e.kind for e in read_history(state / old_app)] == ["cutover", "cutover", "rollback"]
    assert active_override(state / old_app, old_app)[0] is True

    run_state, tis = _run(dag, app="nope", from_app=old_app)
    assert run_state == "failed" and tis["upgrade"].state == "failed"
    assert tis["launch"].state != "success"
