"""The statekeeper_upgrade DAG with dag.test(): a cut-over of a real app state (embedded
broker, no Spark), then a rollback; a bad app id fails the step naming the apps there are.
In make test-chaos: a shadow upgrade of word_count to word_count_v2 on Spark (mode=shadow,
every step a task), migrated while v1 runs, drilled, diffed, cut over."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
import yaml

from statekeeper.airflow.operators.upgrade import SHADOW_STEPS
from statekeeper.airflow.supervision.policy import pending_records
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


@pytest.mark.chaos
def _has_committed(task: dict) -> bool:
    batch = task.get("committed_batch_id")
    return batch is not None and batch >= 0


def test_shadow_upgrade_through_the_dag(airflow_db, broker, tmp_path, monkeypatch, request) -> None:
    """mode=shadow with real apps: word_count runs (Spark, a child process); the DAG migrates
    its state while it runs, launches word_count_v2 beside it (spark-submit on local[2], the
    supervision's launch), waits until both processed the same input (lines produced after
    the migration, which both read), drills v2 with its PySpark model, diffs states and
    outputs (no unexpected key), cuts over (v1 stopped gracefully, v2 active) and hands v2
    to supervision (the shadow launch stopped; `launch` asks statekeeper_app_actions to
    start it). v2's counts equal a recomputation over the whole input."""
    from spark_apps.word_count.generator import word_count_lines
    from spark_apps.word_count_v2 import reference as v2_ref
    from statekeeper.app.store_reader import read_store
    from statekeeper.generate.producer import produce
    from statekeeper.kafka.topic_reader import read_topic
    from statekeeper.testing.app_process import AppProcess
    from statekeeper.versions.takeover import read_takeover, takeover_path

    from .test_supervision import SPARK_CONN, _kill_launched, _spec, _wait

    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    v1_id, v2_id, topic = f"wc-{suffix}", f"wc-{suffix}-v2", f"lines-{suffix}"
    specs = tmp_path / "specs"
    specs.mkdir()
    request.addfinalizer(lambda: _kill_launched(str(specs)))
    state_dir = tmp_path / "state"
    settings = {
        "bootstrap_servers": bootstrap,
        "state_dir": str(state_dir),
        "checkpoint_dir": str(tmp_path / "checkpoints"),
        "max_records_per_batch": 2_000,
        "commit_interval_ms": 1_000,
        "lock_timeout_s": 60,
    }
    v1_spec = _spec(specs, v1_id, settings, {"input_topic": topic, "output_topic": f"wc-{suffix}"})
    v2_spec = _spec(
        specs, v2_id, settings, {"input_topic": topic, "output_topic": f"wc2-{suffix}"},
        app="word_count_v2",
    )  # fmt: skip
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(SPARK_CONN))
    produce(bootstrap, topic, word_count_lines(1_500, seed=61), partitions=4)
    v1_status = state_dir / v1_id / "status.json"
    v1 = AppProcess(
        v1_spec, {"status_file": str(v1_status)}, tmp_path / "v1.log", stop_when_idle=False
    )
    v1.start()
    request.addfinalizer(v1.kill9)
    # Caught up and committed: the migration reads v1's last commit, not what it processed.
    v1.wait_for(
        lambda s: (
            s.get("state") == "RUNNING"
            and pending_records(s) == 0
            and bool(s.get("tasks"))
            and all(_has_committed(t) for t in s["tasks"].values())
        ),
        240,
    )

    # Lines that come after the migration: v1 (running) and v2 (from its takeover) read them.
    root = state_dir / v2_id

    def more_input() -> None:
        _wait(
            lambda: (t := read_takeover(takeover_path(root))) is not None and not t.extra,
            300,
            "the migration",
        )
        produce(bootstrap, topic, word_count_lines(500, seed=62), partitions=4)

    feeder = threading.Thread(target=more_input, daemon=True)
    feeder.start()
    dag = _upgrade_dag(specs, monkeypatch)
    started = time.perf_counter()
    run = dag.test(
        run_conf={
            "mode": "shadow",
            "app": v2_id,
            "from_app": v1_id,
            "stop_old": True,
            "verify": True,
            "drill_spark": True,
            "aligned_timeout_s": 180,
        }
    )
    seconds = time.perf_counter() - started
    tis = {ti.task_id: ti for ti in run.get_task_instances()}
    states = {t: ti.state for t, ti in tis.items()}
    print(f"dag.test(shadow) in {seconds:.1f} s: {states}")
    assert run.state == "success", states
    assert states["upgrade"] == "skipped" and states["shadow_stop"] == "skipped", states
    assert all(states[f"shadow_{s}"] == "success" for s in SHADOW_STEPS if s != "stop"), states
    assert states["launch"] == "success", states
    feeder.join(1)

    drill = tis["shadow_drill"].xcom_pull(task_ids="shadow_drill", key="drill")
    assert drill["passed"] and drill["spark"], drill
    diff = tis["shadow_diff"].xcom_pull(task_ids="shadow_diff", key="diff")
    assert diff["ok"] and diff["unexpected"] == 0, diff
    assert diff["compared"]["totals"]["expected_different"] > 0
    outputs = diff["outputs"]["totals"]
    assert outputs["unexpected"] == 0 and outputs["expected_different"] > 0, diff["outputs"]
    cut = tis["shadow_cutover"].xcom_pull(task_ids="shadow_cutover")
    assert cut["shadow"] and cut["old_stop"].startswith("stopped gracefully"), cut
    assert v1.wait(60) is not None
    handover = tis["shadow_handover"].xcom_pull(task_ids="shadow_handover")
    assert handover["shadow_launch"].startswith("graceful"), handover
    assert tis["shadow_handover"].xcom_pull(task_ids="shadow_handover", key="launch_apps") == [
        v2_id
    ]
    assert active_override(root, v2_id)[0] is True
    assert active_override(state_dir / v1_id, v1_id)[0] is False

    takeover = read_takeover(takeover_path(root))
    expected = v2_ref.recompute(read_topic(bootstrap, topic), upgraded_at=takeover.floors[0][topic])
    v2 = load_app_spec(v2_spec)
    counts = read_store(v2.resolved_settings(), v2.build_topology(), "word-counts", 4)
    assert {w: e["count"] for w, e in counts.items()} == {
        w: e["count"] for w, e in expected.counts.items()
    }
