"""Supervision of a real app through the statekeeper_apps DAG: ``dag.test()`` runs each
reconcile step with its trigger inline; the app is word_count launched detached with the
venv's spark-submit on ``local[2]`` (the ``spark_default`` connection) against the
embedded broker.

One word_count app goes through: launch → a second run reconnects (no second launch) →
kill -9 of its process group while a step watches (process gone → restart, watched on; the
step fails so the restart shows) → SIGSTOP of its group with input pending (batch counter
stalled → SIGKILL, restart) → graceful stop (action=stop); its store then equals the
reference recomputation. A second app that cannot start (no broker) is restarted once, then
marked FAILED (naming the remedy) and never relaunched. Intended stops (``make down``) are
relaunched without counting; an app held in RESTORING past its limit is restarted with that
reason; an action run takes over from a running watch at once.
Thresholds are seconds, not minutes, to keep the suite short.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from spark_apps.word_count import reference as wc_ref
from spark_apps.word_count.generator import word_count_lines
from statekeeper.airflow.supervision.policy import batches_of, pending_records
from statekeeper.airflow.supervision.stops import read_intended_stops
from statekeeper.app.spec import load_app_spec
from statekeeper.app.store_reader import read_store
from statekeeper.generate.producer import produce
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.testing.app_process import AppProcess, spark_app_spec

PARTITIONS = 4
SPARK_CONN = {
    "conn_type": "spark",
    "host": "local[2]",
    "extra": {"deploy-mode": "client", "spark-binary": "spark-submit"},
}
# Seconds: checks twice a second, restarts after 0.2-0.4 s, stalls found after 4 s.
FAST = {
    "check_interval_s": 0.5,
    "startup_timeout_s": 90,
    "stall_timeout_s": 4,
    "heartbeat_timeout_s": 60,
    "lag_growth_checks": 0,
    "backoff_base_s": 0.2,
    "backoff_max_s": 1,
    "max_restarts": 3,
    "stop_timeout_s": 60,
}


def _spec(
    folder: Path,
    app_id: str,
    settings: dict[str, Any],
    params: dict[str, str],
    app: str = "word_count",
) -> Path:
    """A shipped app's spec (word_count's by default) re-targeted (topics, state,
    checkpoints) in ``folder/<app>/``."""
    raw = load_app_spec(spark_app_spec(app)).model_dump()
    raw["application_id"] = app_id
    raw["params"] = {**raw["params"], **params}
    raw["settings"] = {**raw["settings"], **settings}
    raw["supervision"] = {}
    path = folder / app_id / f"{app}.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(raw))
    return path


def _kill_launched(marker: str) -> None:
    """SIGKILL every process group whose leader's command line names ``marker``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            with contextlib.suppress(OSError):
                os.killpg(os.getpgid(int(entry.name)), signal.SIGKILL)


def _status(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _wait(predicate, timeout_s: float, what: str, poll_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")


def _until_running(status_file: Path, since: float) -> dict[str, Any]:
    """The sensor's trigger (mode until_running) run to its event."""
    from statekeeper.airflow.triggers import AppHealthTrigger

    trigger = AppHealthTrigger(
        application_id="app",
        status_file=str(status_file),
        launched_at=since,
        config={"check_interval_s": 0.3, "watch_period_s": 120, "startup_timeout_s": 120},
        mode="until_running",
    )

    async def first_event() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger ended without an event")

    return asyncio.run(first_event())


class Supervised:
    """The statekeeper_apps DAG over one specs folder, run with dag.test()."""

    def __init__(
        self, specs: Path, monkeypatch: pytest.MonkeyPatch, dag_id: str = "statekeeper_apps"
    ) -> None:
        monkeypatch.setenv("STATEKEEPER_SPECS_DIR", str(specs))
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(SPARK_CONN))
        from airflow.dag_processing.dagbag import DagBag

        from .conftest import DAGS

        bag = DagBag(dag_folder=DAGS / "statekeeper_apps.py")
        assert bag.import_errors == {}
        self.dag = bag.dags[dag_id]

    def run(self, **conf: Any) -> tuple[str, dict[str, Any]]:
        """One DAG run; returns (the run's state, {task id: (state, return value)})."""
        started = time.perf_counter()
        # Every param, every run: in dag.test() tasks run in this process, and a run's conf
        # stays in the task's params for the next run.
        conf = {"action": "reconcile", "apps": [], **conf}
        run = self.dag.test(run_conf=conf)
        out, self.failed, self.upgrade, self.restart, self.step = {}, {}, {}, {}, {}
        for ti in run.get_task_instances():
            out[ti.task_id] = (ti.state, ti.xcom_pull(task_ids=ti.task_id))
            for key in ("failed", "upgrade", "restart", "step"):
                getattr(self, key)[ti.task_id] = ti.xcom_pull(task_ids=ti.task_id, key=key)
        print(f"dag.test({conf.get('action', 'reconcile')}): {out} in "
              f"{time.perf_counter() - started:.1f} s")  # fmt: skip
        return run.state, out


@pytest.fixture
def specs(tmp_path, request):
    folder = tmp_path / "specs"
    folder.mkdir()
    request.addfinalizer(lambda: _kill_launched(str(folder)))
    return folder


# ~180 s (three app launches, two 20 s watch periods): make test-chaos, to keep make test
# under 15 minutes. make test keeps an operator's stop against a crash
# (test_a_crash_counts_as_a_restart_five_platform_stops_do_not), the restart limit and the
# cut-over's superseded version; the health rules (a stalled batch counter, lag, heartbeat) are
# tested in tests/airflow/test_supervision_policy.py.
@pytest.mark.chaos
def test_supervisor_reconnects_restarts_after_kill9_and_stall_then_stops(
    airflow_db, broker, specs, monkeypatch
):
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    app_id, topic = f"wc-sup-{suffix}", f"lines-{suffix}"
    state_dir = specs.parent / "state"
    spec = _spec(
        specs,
        app_id,
        {
            "bootstrap_servers": bootstrap,
            "state_dir": str(state_dir),
            "checkpoint_dir": str(specs.parent / "checkpoints"),
            "max_records_per_batch": 1_500,
            "commit_interval_ms": 1000,
            "lock_timeout_s": 60,
        },
        {"input_topic": topic, "output_topic": f"word-counts-{suffix}"},
    )
    status_file = state_dir / app_id / "status.json"
    logs = state_dir / app_id / "logs"
    task = f"supervise_{app_id}"
    produce(bootstrap, topic, word_count_lines(600, seed=11), partitions=PARTITIONS)
    dag = Supervised(specs, monkeypatch)

    # 1. Launch (watched briefly), then wait, as the sensor does, until it runs batches.
    state, out = dag.run(supervision={**FAST, "watch_period_s": 1})
    assert state == "success", out
    first = out[task][1]
    assert first["action"] == "launched" and first["checks"] >= 2, first
    pid = first["pid"]
    running = _until_running(status_file, first["status"]["checked_at"] - 30)
    assert running["healthy"] and running["status"]["state"] == "RUNNING", running

    # 2. The next run reconnects to the same process: no second launch.
    state, out = dag.run(supervision={**FAST, "watch_period_s": 1})
    assert state == "success" and out[task][1]["action"] == "reconnected", out
    assert out[task][1]["pid"] == pid and len(list(logs.glob("*.log"))) == 1

    # 3. kill -9 of the whole group while a step watches: process gone, restarted.
    def kill_soon() -> None:
        time.sleep(2)
        os.killpg(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_soon)
    killer.start()
    state, out = dag.run(supervision={**FAST, "watch_period_s": 20})
    killer.join()
    # The step relaunched the app, watched the new launch to the end of its period, and
    # failed so the restart shows in the grid.
    assert state == "failed" and out[task][0] == "failed", out
    restarted = dag.restart[task]
    assert restarted["reasons"].startswith(f"process gone: pid {pid} exited"), restarted
    assert restarted["restart"] == 1 and restarted["pid"] != pid
    step = dag.step[task]
    assert [r["pid"] for r in step["restarts"]] == [restarted["pid"]] and step["checks"] >= 2
    assert len(list(logs.glob("*.log"))) == 2
    summary = json.loads((status_file.parent / "supervision.json").read_text())
    assert [r["pid"] for r in summary["restarts"]] == [restarted["pid"]]

    # 4. More input, the app paused (SIGSTOP) in the middle of it: stalled, restarted.
    produce(bootstrap, topic, word_count_lines(1_200, seed=12), partitions=PARTITIONS)
    _wait(
        lambda: (
            (s := _status(status_file)).get("started_at", 0) >= restarted["launched_at"]
            and s.get("state") == "RUNNING"
            and (batches_of(s) or 0) >= 1
            and (pending_records(s) or 0) > 0
        ),
        120,
        "the restarted app to work through a backlog",
    )
    second = restarted["pid"]
    os.killpg(second, signal.SIGSTOP)
    state, out = dag.run(supervision={**FAST, "watch_period_s": 20})
    stalled = dag.restart[task]
    assert state == "failed" and dag.step[task]["action"] == "restarted", out
    assert "batch counter stalled" in stalled["reasons"], stalled
    assert stalled["restart"] == 2 and stalled["backoff_s"] == pytest.approx(0.4)

    # 5. It drains the input; a graceful stop; the store equals the recomputation.
    _wait(
        lambda: (
            (s := _status(status_file)).get("started_at", 0) >= stalled["launched_at"]
            and s.get("state") == "RUNNING"
            and pending_records(s) == 0
        ),
        180,
        "the app to drain its input",
        poll_s=0.5,
    )
    state, out = dag.run(action="stop", supervision=FAST)
    stop = out[task][1]
    assert state == "success" and stop["outcome"] == "graceful", out
    assert _status(status_file)["state"] == "NOT_RUNNING"
    [intended] = read_intended_stops(status_file.parent)[:1]
    assert intended.pid == stalled["pid"] and intended.by.startswith("action=stop (run ")
    state, out = dag.run(supervision=FAST)  # stopped by an operator: skipped, not relaunched
    assert out[task][0] == "skipped" and len(list(logs.glob("*.log"))) == 3, out
    summary = json.loads((status_file.parent / "supervision.json").read_text())
    assert len(summary["restarts"]) == 2 and summary["relaunches"] == [], summary

    settings = load_app_spec(spec).resolved_settings()
    expected = wc_ref.recompute(read_topic(bootstrap, topic))
    counts = read_store(settings, load_app_spec(spec).build_topology(), "word-counts", PARTITIONS)
    assert counts == expected.counts


def test_restart_limit_marks_the_app_failed_and_stops_relaunching(
    airflow_db, broker, specs, monkeypatch
):
    suffix = uuid.uuid4().hex[:6]
    app_id = f"wc-fail-{suffix}"
    state_dir = specs.parent / "state"
    spec = _spec(
        specs,
        app_id,
        # Nothing listens there: the app gives up after 1 s and exits.
        {"bootstrap_servers": "127.0.0.1:9", "broker_timeout_s": 1, "state_dir": str(state_dir)},
        {"input_topic": f"lines-{suffix}", "output_topic": f"word-counts-{suffix}"},
    )
    logs = state_dir / app_id / "logs"
    task = f"supervise_{app_id}"
    dag = Supervised(specs, monkeypatch)
    limits = {**FAST, "max_restarts": 1, "watch_period_s": 60, "backoff_base_s": 0}

    # One step: the launch fails, it is restarted and watched on, the relaunch fails too:
    # over the limit, FAILED, with the remedy.
    state, out = dag.run(supervision=limits)
    assert state == "failed" and out[task][0] == "failed", out
    # Seen either way: its status says ERROR, or its process is already gone.
    assert re.match(
        "app reported ERROR: BrokerUnavailableError|process gone", dag.restart[task]["reasons"]
    )
    assert len(list(logs.glob("*.log"))) == 2
    failed = dag.failed[task]
    assert failed["explanation"] == "1 restart(s) within 3600s reached max_restarts=1", failed
    assert re.match("app reported ERROR: BrokerUnavailableError|process gone", failed["reasons"])
    assert "statekeeper_app_actions DAG with action=restart" in failed["remedy"]

    state, out = dag.run(supervision=limits)  # FAILED: fails at once, no launch
    assert state == "failed" and len(list(logs.glob("*.log"))) == 2, out

    # Disabled in its spec: the desired state is "stopped"; nothing runs, nothing launches.
    raw = yaml.safe_load(spec.read_text())
    spec.write_text(yaml.safe_dump({**raw, "enabled": False}))
    state, out = dag.run(supervision=limits)
    assert state == "success" and out[task][1]["why"] == "disabled in its spec (enabled: false)"
    assert len(list(logs.glob("*.log"))) == 2


def test_an_app_cut_over_from_stays_stopped_and_a_rollback_runs_it_again(
    airflow_db, broker, specs, monkeypatch
):
    from statekeeper.versions.history import CUTOVER, DONE, ROLLBACK, UpgradeEvent, record_event

    suffix = uuid.uuid4().hex[:6]
    app_id = f"wc-old-{suffix}"
    state_dir = specs.parent / "state"
    _spec(
        specs,
        app_id,
        {"bootstrap_servers": "127.0.0.1:9", "broker_timeout_s": 1, "state_dir": str(state_dir)},
        {"input_topic": f"lines-{suffix}", "output_topic": f"word-counts-{suffix}"},
    )
    logs, task = state_dir / app_id / "logs", f"supervise_{app_id}"
    dag = Supervised(specs, monkeypatch)
    limits = {**FAST, "max_restarts": 5, "watch_period_s": 1, "backoff_base_s": 0}
    # Enabled in its spec, but a cut-over made another version active: not launched.
    record_event([state_dir / app_id], UpgradeEvent(CUTOVER, app_id, f"{app_id}-v2", DONE))
    state, out = dag.run(supervision=limits)
    assert state == "success", out
    assert out[task][1]["why"] == f"superseded by {app_id}-v2 (cutover done)"
    assert not list(logs.glob("*.log"))
    # Rolled back: active again, launched (this one cannot reach a broker and fails).
    record_event([state_dir / app_id], UpgradeEvent(ROLLBACK, f"{app_id}-v2", app_id, DONE))
    dag.run(supervision=limits)
    assert list(logs.glob("*.log"))


def test_running_sensor_defers_to_the_trigger_and_reads_its_event(tmp_path):
    """The sensor's own path: execute defers to the trigger (until_running), the trigger
    reads the status file, execute_complete passes on RUNNING and fails on ERROR."""
    from airflow.sdk.exceptions import AirflowException, TaskDeferred

    from statekeeper.airflow.sensors import StatekeeperAppRunningSensor

    spec = _spec(
        tmp_path,
        "wc-sensor",
        {"state_dir": str(tmp_path / "state")},
        {"input_topic": "lines", "output_topic": "counts"},
    )
    status_file = tmp_path / "state" / "wc-sensor" / "status.json"
    status_file.parent.mkdir(parents=True)
    sensor = StatekeeperAppRunningSensor(
        task_id="wait", spec_path=str(spec), poke_interval=0.2, timeout=5
    )
    for doc, healthy in [
        (
            {
                "state": "RUNNING",
                "throughput": {"batches": 3},
                "task_live": {"0_0": {"source_lag": 0}},
            },
            True,
        ),
        ({"state": "ERROR", "error": "StatekeeperError: boom"}, False),
    ]:
        status_file.write_text(json.dumps({**doc, "started_at": time.time()}))
        with pytest.raises(TaskDeferred) as deferred:
            sensor.execute({})
        trigger = deferred.value.trigger
        assert trigger.serialize()[1]["mode"] == "until_running"

        async def first_event(trigger=trigger) -> dict[str, Any]:
            async for event in trigger.run():
                return event.payload
            raise AssertionError("no event")

        event = asyncio.run(first_event())
        assert event["healthy"] is healthy, event
        if healthy:
            assert sensor.execute_complete({}, event)["state"] == "RUNNING"
        else:
            with pytest.raises(AirflowException, match="not running: app reported ERROR: .*boom"):
                sensor.execute_complete({}, event)


def _drained(status_file: Path, since: float) -> dict[str, Any]:
    """The status of the launch started after ``since`` once it has processed everything.

    No batch is required of that launch: when the app it replaced took the last input in
    the batch it finished while stopping (a race between the input and the stop), the new
    launch starts caught up, runs no micro-batch and is RUNNING at once."""
    return _wait(
        lambda: (
            (s := _status(status_file)).get("started_at", 0) >= since
            and s.get("state") == "RUNNING"
            and pending_records(s) == 0
            and s
        ),
        240,
        "the app to drain its input",
        poll_s=0.5,
    )


#: make test-chaos runs the series 5 times in a row (a start-up race once hung it 1 in 5).
REDEPLOY_REPEATS = int(os.environ.get("STATEKEEPER_REDEPLOY_REPEATS", "1"))


@pytest.mark.chaos
@pytest.mark.parametrize("round_", range(1, REDEPLOY_REPEATS + 1))
def test_redeploy_stateless_then_from_a_snapshot(airflow_db, broker, specs, monkeypatch, round_):
    from statekeeper.ops.snapshot_app import snapshot_running_app

    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    app_id, topic = f"wc-redeploy-{suffix}", f"lines-{suffix}"
    state_dir = specs.parent / "state"
    spec = _spec(
        specs,
        app_id,
        {
            "bootstrap_servers": bootstrap,
            "state_dir": str(state_dir),
            "checkpoint_dir": str(specs.parent / "checkpoints"),
            "snapshot_url": (specs.parent / "snaps").as_uri(),
            "lock_timeout_s": 60,
        },
        {"input_topic": topic, "output_topic": f"word-counts-{suffix}"},
    )
    status_file = state_dir / app_id / "status.json"
    task = f"supervise_{app_id}"
    produce(bootstrap, topic, word_count_lines(600, seed=21), partitions=PARTITIONS)
    dag = Supervised(specs, monkeypatch)
    quick = {**FAST, "watch_period_s": 1}
    state, out = dag.run(supervision=quick)
    assert state == "success" and out[task][1]["action"] == "launched", out
    doc = _drained(status_file, 0)
    request = snapshot_running_app(doc["status_url"], timeout_s=120)
    assert request["state"] == "uploaded", request

    # stateless: local state deleted, every store rebuilt from its whole changelog.
    produce(bootstrap, topic, word_count_lines(300, seed=22), partitions=PARTITIONS)
    started = time.time()
    state, out = dag.run(action="redeploy", upgrade_mode="stateless", supervision=quick)
    assert state == "success" and out[task][1]["action"] == "launched", out
    deleted = [f"{s}_{p}" for s in (0, 1) for p in range(PARTITIONS)]
    assert dag.upgrade[task] == {"mode": "stateless", "deleted": deleted}
    # The new lines may be the stopped app's last batch (it finishes the batch it began) or
    # the new one's first: either way it ends RUNNING with nothing pending. Its tasks open
    # at start (replaying the batches the planner cannot know were committed) or in a batch.
    doc = _drained(status_file, started)
    restores = [r for t in doc["tasks"].values() for r in (t.get("restore") or [])]
    assert restores and all(r["full"] for r in restores), restores
    assert any(r["records"] > 0 for r in restores), restores

    # snapshot: the stopped app gets the newest snapshot installed (plus the changelog tail).
    produce(bootstrap, topic, word_count_lines(300, seed=23), partitions=PARTITIONS)
    started = time.time()
    state, out = dag.run(action="redeploy", upgrade_mode="snapshot", supervision=quick)
    assert state == "success" and out[task][1]["action"] == "launched", out
    stores = dag.upgrade[task]["stores"]
    assert stores and {r["source"] for r in stores} == {"snapshot"}, stores
    _drained(status_file, started)
    state, out = dag.run(action="stop", supervision=FAST)
    assert state == "success" and out[task][1]["outcome"] == "graceful", out

    settings = load_app_spec(spec).resolved_settings()
    expected = wc_ref.recompute(read_topic(bootstrap, topic))
    counts = read_store(settings, load_app_spec(spec).build_topology(), "word-counts", PARTITIONS)
    assert counts == expected.counts


@pytest.mark.chaos
def test_redeploy_with_migrate_cuts_over_from_the_running_version(
    airflow_db, broker, specs, monkeypatch
):
    """word_count runs under supervision; a redeploy of word_count_v2 with
    ``upgrade_mode=migrate`` stops it, migrates its counts, verifies them and launches v2,
    which takes over; v1's next reconcile leaves it stopped (superseded, not a crash)."""
    from spark_apps.word_count_v2 import reference as v2_ref
    from statekeeper.versions.takeover import read_takeover

    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    v1_id, v2_id, topic = f"wc-{suffix}", f"wc-{suffix}-v2", f"lines-{suffix}"
    state_dir = specs.parent / "state"
    settings = {
        "bootstrap_servers": bootstrap,
        "state_dir": str(state_dir),
        "checkpoint_dir": str(specs.parent / "checkpoints"),
        "snapshot_url": (specs.parent / "snaps").as_uri(),
        "lock_timeout_s": 60,
    }
    _spec(specs, v1_id, settings, {"input_topic": topic, "output_topic": f"wc-{suffix}"})
    v2_spec = _spec(
        specs, v2_id, settings, {"input_topic": topic, "output_topic": f"wc2-{suffix}"},
        app="word_count_v2",
    )  # fmt: skip
    produce(bootstrap, topic, word_count_lines(600, seed=31), partitions=PARTITIONS)
    dag = Supervised(specs, monkeypatch)
    quick = {**FAST, "watch_period_s": 1}
    state, out = dag.run(supervision=quick)
    assert out[f"supervise_{v1_id}"][1]["action"] == "launched", out
    assert out[f"supervise_{v2_id}"][1]["why"] == "disabled in its spec (enabled: false)"
    _drained(state_dir / v1_id / "status.json", 0)

    produce(bootstrap, topic, word_count_lines(300, seed=32), partitions=PARTITIONS)
    started = time.time()
    state, out = dag.run(
        action="redeploy", upgrade_mode="migrate", from_app=v1_id, apps=[v2_id],
        supervision=quick,
    )  # fmt: skip
    task = f"supervise_{v2_id}"
    assert state == "success" and out[task][1]["action"] == "launched", out
    report = dag.upgrade[task]["report"]
    assert report["old_stop"].startswith("stopped gracefully"), report
    assert report["verify"]["ok"] and report["verify"]["totals"]["unexpected"] == 0
    _drained(state_dir / v2_id / "status.json", started)
    # v1's step (in the redeploy run after v2's, or in the next) finds its launch gone:
    # superseded, not a crash, not relaunched; then it stays stopped.
    state, out = dag.run(supervision=quick)
    assert state == "success", out
    step = out[f"supervise_{v1_id}"][1]
    assert f"superseded by {v2_id} (cutover done)" in (step.get("notes") or [step.get("why")])
    assert len(list((state_dir / v1_id / "logs").glob("*.log"))) == 1
    v2_status = state_dir / v2_id / "status.json"
    batches = (_status(v2_status).get("last_batch") or {}).get("batch_id", -1)
    produce(bootstrap, topic, word_count_lines(200, seed=33), partitions=PARTITIONS)
    _wait(
        lambda: (_status(v2_status).get("last_batch") or {}).get("batch_id", -1) > batches,
        120,
        "v2 to process the lines that came after the cut-over",
    )
    _drained(v2_status, started)
    state, out = dag.run(action="stop", apps=[v2_id], supervision=FAST)
    assert out[task][1]["outcome"] == "graceful", out
    # A graceful stop finishes the running batch, not the input: drain what is left (the
    # status's lag lags the log by up to 2 s, so "drained" above can come a batch early).
    drain = AppProcess(v2_spec, {"status_file": str(v2_status)}, specs.parent / "drain.log")
    assert drain.start().wait(300) == 0, (specs.parent / "drain.log").read_text()[-3000:]

    takeover = read_takeover(state_dir / v2_id / "takeover.json")
    first = dict(takeover.floors[0][topic])
    expected = v2_ref.recompute(read_topic(bootstrap, topic), upgraded_at=first)
    v2 = load_app_spec(v2_spec)
    entries = read_store(v2.resolved_settings(), v2.build_topology(), "word-counts", PARTITIONS)
    assert {w: e["count"] for w, e in entries.items()} == {
        w: e["count"] for w, e in expected.counts.items()
    }


@pytest.mark.chaos
def test_redeploy_with_backfill_processes_the_history_then_streams(
    airflow_db, broker, specs, monkeypatch
):
    """A new app over a topic with history: ``upgrade_mode=backfill`` runs
    ``statekeeper backfill`` first, then launches the stream, which goes on from there."""
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    app_id, topic = f"wc-bf-{suffix}", f"lines-{suffix}"
    state_dir = specs.parent / "state"
    spec = _spec(
        specs,
        app_id,
        {
            "bootstrap_servers": bootstrap,
            "state_dir": str(state_dir),
            "checkpoint_dir": str(specs.parent / "checkpoints"),
            "snapshot_url": (specs.parent / "snaps").as_uri(),
        },
        {"input_topic": topic, "output_topic": f"wc-{suffix}"},
    )
    produce(bootstrap, topic, word_count_lines(3_000, seed=51), partitions=PARTITIONS)
    dag = Supervised(specs, monkeypatch, dag_id="statekeeper_app_actions")
    started = time.time()
    state, out = dag.run(
        action="redeploy", upgrade_mode="backfill", apps=[app_id], supervision={**FAST}
    )
    task = f"act_{app_id}"
    assert state == "success" and out[task][1]["action"] == "redeploy", out
    report = dag.upgrade[task]["report"]
    assert dag.upgrade[task]["mode"] == "backfill" and report["source_records"] == 3_000, report
    status_file = state_dir / app_id / "status.json"
    _drained(status_file, started)
    produce(bootstrap, topic, word_count_lines(300, seed=52), partitions=PARTITIONS)
    doc = _wait(
        lambda: (s := _status(status_file)).get("last_batch") and pending_records(s) == 0 and s,
        120,
        "the stream to take the new lines",
    )
    assert doc["state"] == "RUNNING"
    state, out = dag.run(action="stop", apps=[app_id], supervision=FAST)
    assert out[task][1]["outcome"] == "graceful", out
    expected = wc_ref.recompute(read_topic(bootstrap, topic))
    app = load_app_spec(spec)
    counts = read_store(app.resolved_settings(), app.build_topology(), "word-counts", PARTITIONS)
    assert counts == expected.counts


def test_spark_submit_command_comes_from_the_connection(tmp_path, monkeypatch):
    """The provider's hook builds the command from spark_default (master, deploy mode,
    binary); the app's entry point and settings follow; the binary is resolved."""
    from statekeeper.airflow.hooks.spark_app import LAUNCHER, StatekeeperSparkAppHook, entry_point

    conn = {**SPARK_CONN, "host": "spark://127.0.0.1:17077"}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(conn))
    spec = _spec(tmp_path, "wc-cmd", {}, {"input_topic": "l", "output_topic": "c"})
    hook = StatekeeperSparkAppHook(str(spec), {"status_port": None, "max_records_per_batch": 5})
    cmd = hook.command({"restore_from_snapshots": False})
    assert Path(cmd[0]).name == "spark-submit" and Path(cmd[0]).is_file()
    assert cmd[1:] == [
        "--master",
        "spark://127.0.0.1:17077",
        "--name",
        "statekeeper-wc-cmd",
        "--deploy-mode",
        "client",
        str(LAUNCHER),  # no app.py beside this spec
        "--spec",
        str(spec.resolve()),
        "--set",
        "status_port=null",
        "--set",
        "max_records_per_batch=5",
        "--set",
        "restore_from_snapshots=false",
    ]
    assert entry_point(spark_app_spec("word_count")).name == "app.py"
    env = hook.launch_env()
    assert "STATEKEEPER_DIE_WITH_PARENT" not in env and env["SPARK_LOCAL_IP"] == "127.0.0.1"


def _wc_spec(specs: Path, prefix: str, bootstrap: str, **settings: Any) -> tuple[str, Path, str]:
    """A word_count spec of its own (app id, spec, input topic) under ``specs``."""
    suffix = uuid.uuid4().hex[:6]
    app_id, topic = f"{prefix}-{suffix}", f"lines-{suffix}"
    spec = _spec(
        specs,
        app_id,
        {
            "bootstrap_servers": bootstrap,
            "state_dir": str(specs.parent / "state"),
            "checkpoint_dir": str(specs.parent / "checkpoints"),
            "lock_timeout_s": 60,
            **settings,
        },
        {"input_topic": topic, "output_topic": f"word-counts-{suffix}"},
    )
    return app_id, spec, topic


def _gone(pid: int, timeout_s: float = 90) -> None:
    from statekeeper.procfs import group_members

    _wait(lambda: not group_members(pid), timeout_s, f"process group {pid} to exit")


def test_a_crash_counts_as_a_restart_five_platform_stops_do_not(
    airflow_db, broker, specs, monkeypatch
):
    """kill -9 once, then five `platform down` stops (the platform's own code writes the
    intended stop and signals the app): one restart counted, five uncounted relaunches,
    nothing FAILED although max_restarts is 3."""
    from statekeeper.platform import PlatformConfig
    from statekeeper.platform.control import stop_apps

    app_id, _spec_path, topic = _wc_spec(specs, "wc-cycles", broker.bootstrap_servers)
    produce(broker.bootstrap_servers, topic, word_count_lines(200, seed=31), partitions=PARTITIONS)
    status_file = specs.parent / "state" / app_id / "status.json"
    task = f"supervise_{app_id}"
    dag = Supervised(specs, monkeypatch)
    quick = {**FAST, "watch_period_s": 1, "max_restarts": 3}
    started = time.monotonic()

    state, out = dag.run(supervision=quick)
    assert state == "success" and out[task][1]["action"] == "launched", out
    pid = out[task][1]["pid"]
    os.killpg(pid, signal.SIGKILL)
    _gone(pid)
    state, out = dag.run(supervision=quick)  # found gone at reconcile: a crash, restarted
    assert state == "failed" and dag.restart[task]["restart"] == 1, out
    assert dag.restart[task]["reasons"].endswith("(found at reconcile)")
    pid = dag.restart[task]["pid"]

    platform = PlatformConfig(root=specs.parent, specs_dir=specs)
    for cycle in range(5):
        assert stop_apps(platform, set(), 60) == [pid], cycle
        _gone(pid)
        [stop] = read_intended_stops(status_file.parent)[:1]
        assert (stop.pid, stop.by, stop.then) == (pid, "platform down", "relaunch")
        state, out = dag.run(supervision=quick)
        assert state == "success", (cycle, out)
        assert out[task][1]["action"] == "launched" and out[task][1]["restarts"] == [], out
        assert "not a restart" in out[task][1]["notes"][0], out
        pid = out[task][1]["pid"]
    summary = json.loads((status_file.parent / "supervision.json").read_text())
    assert len(summary["restarts"]) == 1 and summary["failed"] is None, summary
    assert [r["by"] for r in summary["relaunches"]] == ["platform down"] * 5
    assert stop_apps(platform, set(), 60) == [pid]
    print(f"1 kill -9 + 5 platform stops: {time.monotonic() - started:.1f} s")


@pytest.mark.chaos  # ~100 s: make test-chaos (keeps make test under 15 minutes)
def test_an_app_held_in_restoring_past_its_limit_is_restarted_with_that_reason(
    airflow_db, broker, specs, monkeypatch
):
    """The first batch's task 0_0 waits for its task lock, held here: RESTORING without
    restore progress; past restore_timeout_s the app is restarted with that reason. The
    lock is let go once the restart is recorded, and the relaunch runs."""
    import fcntl

    app_id, _spec_path, topic = _wc_spec(
        specs, "wc-restoring", broker.bootstrap_servers, lock_timeout_s=600
    )
    produce(broker.bootstrap_servers, topic, word_count_lines(200, seed=41), partitions=PARTITIONS)
    app_dir = specs.parent / "state" / app_id
    lock_file = app_dir / "0_0" / ".lock"
    lock_file.parent.mkdir(parents=True)
    holder = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(holder, fcntl.LOCK_EX)

    def release_after_restart() -> None:
        def restarted() -> bool:
            with contextlib.suppress(OSError, ValueError):
                return bool(json.loads((app_dir / "supervision.json").read_text())["restarts"])
            return False

        with contextlib.suppress(AssertionError):
            _wait(restarted, 200, "the restart")
        os.close(holder)  # lets go of the lock

    releaser = threading.Thread(target=release_after_restart, daemon=True)
    releaser.start()
    task = f"supervise_{app_id}"
    dag = Supervised(specs, monkeypatch)
    limits = {**FAST, "restore_timeout_s": 8, "stall_timeout_s": 60, "watch_period_s": 60}
    started = time.time()
    state, out = dag.run(supervision=limits)
    releaser.join()
    restart = dag.restart[task]
    assert state == "failed" and restart is not None, out
    assert restart["reasons"].startswith("RESTORING for "), restart
    assert "restore progress stuck at" in restart["reasons"], restart
    summary = json.loads((app_dir / "supervision.json").read_text())
    assert summary["restarts"][0]["kinds"] == ["restore_stalled"], summary
    doc = _drained(app_dir / "status.json", started)
    assert doc["pid"] and doc["state"] == "RUNNING"
    state, out = dag.run(action="stop", supervision=FAST)
    assert state == "success" and out[task][1]["outcome"] == "graceful", out


def _idle(status_file: Path, quiet_s: float = 6) -> None:
    """Wait until the app ran no batch for ``quiet_s`` with nothing pending (the repartition
    topic's records of its last batch included): Spark has no batch left to run."""
    seen: dict[str, Any] = {}

    def idle() -> bool:
        s = _status(status_file)
        key = (batches_of(s), pending_records(s))
        if key != seen.get("key"):
            seen.update(key=key, since=time.monotonic())
        return key[1] == 0 and time.monotonic() - seen["since"] >= quiet_s

    _wait(idle, 120, "the app to be idle", poll_s=0.5)


@pytest.mark.chaos  # ~100 s: make test-chaos (keeps make test under 15 minutes)
def test_an_action_run_takes_effect_at_once_while_a_watch_runs(
    airflow_db, broker, specs, monkeypatch, tmp_path
):
    """A watch runs (its own process, as the scheduler would run it); the actions DAG's
    restart stops and relaunches the idle app within seconds, the watch hands over to the
    new launch instead of counting a crash, and the restarted app, without new input (no
    micro-batch comes), reports RUNNING."""
    import subprocess
    import sys

    app_id, _spec_path, topic = _wc_spec(specs, "wc-action", broker.bootstrap_servers)
    produce(broker.bootstrap_servers, topic, word_count_lines(300, seed=51), partitions=PARTITIONS)
    status_file = specs.parent / "state" / app_id / "status.json"
    dag = Supervised(specs, monkeypatch)
    state, out = dag.run(supervision={**FAST, "watch_period_s": 1})
    first = out[f"supervise_{app_id}"][1]
    assert state == "success" and first["action"] == "launched", out
    _drained(status_file, 0)
    _idle(status_file)

    log = tmp_path / "watch.log"
    conf = {"action": "reconcile", "apps": [], "supervision": {**FAST, "watch_period_s": 45}}
    airflow = str(Path(sys.executable).with_name("airflow"))
    with log.open("wb") as out_file:
        watch = subprocess.Popen(
            [airflow, "dags", "test", "statekeeper_apps", "-c", json.dumps(conf)],
            stdout=out_file,
            stderr=subprocess.STDOUT,
            env={**os.environ},
        )
    try:
        _wait(
            lambda: "reconnecting to the running launch" in log.read_text(errors="replace"),
            90,
            "the watch to start",
            poll_s=0.5,
        )
        actions = Supervised(specs, monkeypatch, "statekeeper_app_actions")
        asked = time.monotonic()
        state, out = actions.run(action="restart", apps=[app_id], supervision=FAST)
        took = time.monotonic() - asked
        acted = out[f"act_{app_id}"][1]
        assert state == "success" and acted["action"] == "restart", out
        assert acted["stopped"]["outcome"] == "graceful" and acted["pid"] != first["pid"]
        print(f"action=restart took effect in {took:.1f} s while a watch ran")
        assert took < 30
        assert watch.wait(180) == 0, log.read_text()[-3000:]
    finally:
        if watch.poll() is None:
            watch.kill()
    text = log.read_text(errors="replace")
    assert f"now watching pid {acted['pid']}" in text or "watching the new launch" in text, text[
        -3000:
    ]
    assert "RESTARTED" not in text
    summary = json.loads((status_file.parent / "supervision.json").read_text())
    assert summary["restarts"] == [] and summary["identity"]["pid"] == acted["pid"], summary
    doc = _wait(  # no new input: RUNNING without a micro-batch
        lambda: (
            (s := _status(status_file)).get("started_at", 0) >= acted["launched_at"] - 1
            and s.get("state") == "RUNNING"
            and s
        ),
        60,
        "the restarted app, without new input, to report RUNNING",
    )
    assert batches_of(doc) == 0 and pending_records(doc) == 0, doc
    state, out = actions.run(action="stop", apps=[app_id], supervision=FAST)
    assert state == "success" and out[f"act_{app_id}"][1]["outcome"] == "graceful", out
