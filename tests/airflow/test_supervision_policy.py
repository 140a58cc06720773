"""The supervision policy (pure): config layering and validation, each health rule, backoff
and the restart limit. No Airflow, no processes: observations are built by hand."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from statekeeper.airflow.supervision.policy import (
    HealthMonitor,
    Observation,
    SupervisionConfig,
    SupervisionRecord,
    backoff_s,
    decide_restart,
    is_running_with_progress,
    supervision_config,
)
from statekeeper.airflow.supervision.process import AppProcessIdentity, kill_group
from statekeeper.errors import ConfigError

T0 = 1_000_000.0


def _status(state="RUNNING", batches=0, lags=(0,), started_at=T0, **extra):
    return {
        "state": state,
        "started_at": started_at,
        "throughput": {"batches": batches},
        "task_live": {f"0_{i}": {"source_lag": lag} for i, lag in enumerate(lags)},
        **extra,
    }


def _obs(at, status=None, alive=True, fresh=None, detail=""):
    return Observation(T0 + at, alive, detail, status, T0 + (at if fresh is None else fresh), "url")


def test_defaults_layers_and_clear_errors():
    cfg = supervision_config()
    assert cfg == SupervisionConfig()
    assert (cfg.max_restarts, cfg.restart_window_s, cfg.backoff_base_s) == (5, 3600.0, 10.0)
    cfg = supervision_config(
        ("spec a.yaml", {"stall_timeout_s": 30, "max_restarts": 2}),
        ("DAG param supervision", {"max_restarts": 1}),
    )
    assert (cfg.stall_timeout_s, cfg.max_restarts) == (30, 1)
    with pytest.raises(ConfigError, match=r"from spec a.yaml: unknown 'zzz'; known"):
        supervision_config(("spec a.yaml", {"zzz": 3}))
    with pytest.raises(
        ConfigError,
        match=r"from DAG param supervision: unknown 'stall_timeout' \(did you mean "
        r"stall_timeout_s\?\)",
    ):
        supervision_config(("DAG param supervision", {"stall_timeout": 300}))
    with pytest.raises(ConfigError, match="from DAG param.*max_restarts: Input should be greater"):
        supervision_config(("DAG param", {"max_restarts": -1}))
    with pytest.raises(ConfigError, match=r"backoff_max_s \(1.0\) is below backoff_base_s"):
        supervision_config(("spec", {"backoff_base_s": 5, "backoff_max_s": 1}))
    with pytest.raises(ConfigError, match="watch_period_s .* below check_interval_s"):
        supervision_config(("spec", {"watch_period_s": 1, "check_interval_s": 5}))
    with pytest.raises(ConfigError, match="expected a mapping"):
        supervision_config(("spec", ["x"]))  # type: ignore[list-item]


def test_process_gone_wins_over_everything():
    monitor = HealthMonitor(SupervisionConfig(), T0)
    found = monitor.observe(_obs(1, _status(), alive=False, detail="pid 7 exited"))
    assert [(v.kind, v.reason) for v in found] == [("process_gone", "process gone: pid 7 exited")]


def test_startup_timeout_and_app_error():
    monitor = HealthMonitor(SupervisionConfig(startup_timeout_s=30), T0)
    assert monitor.observe(_obs(29)) == []
    [v] = monitor.observe(_obs(31))
    assert v.kind == "startup_timeout" and "no status 31s after launch" in v.reason
    [v] = monitor.observe(_obs(32, _status("ERROR", error="StatekeeperError: boom")))
    assert (v.kind, v.reason) == ("app_error", "app reported ERROR: StatekeeperError: boom")


def test_stalled_only_while_input_is_pending_and_running():
    cfg = SupervisionConfig(stall_timeout_s=10, heartbeat_timeout_s=1000, lag_growth_checks=0)
    monitor = HealthMonitor(cfg, T0)
    assert monitor.observe(_obs(0, _status(batches=3, lags=(5, 0)))) == []
    assert monitor.observe(_obs(10, _status(batches=3, lags=(5, 0)))) == []  # not past 10 s
    [v] = monitor.observe(_obs(11, _status(batches=3, lags=(5, 0))))
    assert v.kind == "stalled"
    assert v.reason.startswith("batch counter stalled at 3 for 11s while 5 records are pending")
    # An advancing counter resets the clock; an idle app (nothing pending) is not stalled.
    assert monitor.observe(_obs(12, _status(batches=4, lags=(5, 0)))) == []
    idle = HealthMonitor(cfg, T0)
    assert idle.observe(_obs(0, _status(batches=3, lags=(0, 0)))) == []
    assert idle.observe(_obs(100, _status(batches=3, lags=(0, 0)))) == []
    restoring = HealthMonitor(cfg, T0)
    assert restoring.observe(_obs(0, _status("RESTORING", lags=(9,)))) == []
    assert restoring.observe(_obs(100, _status("RESTORING", lags=(9,)))) == []


def test_unresponsive_status():
    monitor = HealthMonitor(SupervisionConfig(heartbeat_timeout_s=20), T0)
    assert monitor.observe(_obs(30, _status(), fresh=15)) == []
    [v] = monitor.observe(_obs(40, _status(), fresh=15))
    assert v.kind == "unresponsive" and "status unresponsive for 25s" in v.reason


def test_lag_growing_for_n_consecutive_checks():
    cfg = SupervisionConfig(lag_growth_checks=3, stall_timeout_s=1000)
    monitor = HealthMonitor(cfg, T0)
    lags = [10, 20, 30, 25, 40, 50]  # grows twice, drops (reset), then grows again
    for i, lag in enumerate(lags):
        assert monitor.observe(_obs(i, _status(batches=i, lags=(lag,)))) == [], i
    [v] = monitor.observe(_obs(7, _status(batches=7, lags=(60,))))
    assert v.kind == "lag_growing"
    assert "grew for 3 consecutive checks (25 -> 60 records" in v.reason
    off = HealthMonitor(SupervisionConfig(lag_growth_checks=0), T0)
    assert all(off.observe(_obs(i, _status(batches=i, lags=(i * 10,)))) == [] for i in range(30))


def test_backoff_is_exponential_and_capped():
    cfg = SupervisionConfig(backoff_base_s=2, backoff_factor=3, backoff_max_s=50)
    assert [backoff_s(cfg, n) for n in range(5)] == [2, 6, 18, 50, 50]


def test_restart_limit_within_the_window():
    cfg = SupervisionConfig(max_restarts=2, restart_window_s=100, backoff_base_s=1)
    first = decide_restart(cfg, [], T0)
    assert (first.action, first.backoff_s, first.restarts_in_window) == ("restart", 1, 0)
    history = [{"at": T0 - 150}, {"at": T0 - 50}]  # one outside the window
    second = decide_restart(cfg, history, T0)
    assert (second.action, second.backoff_s) == ("restart", 2)
    history.append({"at": T0 - 10})
    third = decide_restart(cfg, history, T0)
    assert third.action == "fail"
    assert "2 restart(s) within 100s reached max_restarts=2" in third.explanation
    assert decide_restart(SupervisionConfig(max_restarts=0), [], T0).action == "fail"


def test_sensor_condition_and_record_round_trip():
    assert not is_running_with_progress(_status("RESTORING"), None, 1)
    assert not is_running_with_progress(_status(batches=2, lags=(4,)), 2, 1)
    assert is_running_with_progress(_status(batches=3, lags=(4,)), 2, 1)
    assert is_running_with_progress(_status(batches=2, lags=(0,)), 2, 1)  # caught up
    record = SupervisionRecord("a", {"pid": 1}, [{"at": T0}], None, {"at": T0})
    assert SupervisionRecord.from_json("a", record.to_json()) == record
    assert SupervisionRecord.from_json("a", None) == SupervisionRecord("a")


def test_identity_tells_a_reused_pid_and_a_zombie_from_the_app():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ident = AppProcessIdentity.of_launched("a", proc.pid, T0, "log", "status", ["x"])
        assert ident.alive()[0] is True
        reused = AppProcessIdentity.from_json({**ident.to_json(), "start_ticks": 1})
        assert reused.alive() == (
            False,
            f"pid {proc.pid} exited (the pid now belongs to another process)",
        )
        assert kill_group(reused) is False  # never signal a process that is not ours
        remote = AppProcessIdentity.from_json({**ident.to_json(), "host": "elsewhere"})
        assert remote.alive()[0] is None
        os.kill(proc.pid, signal.SIGKILL)
        os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)  # a zombie until reaped
        assert ident.alive()[0] is False
    finally:
        proc.kill()
        proc.wait()


# -- intended stops (make down, action=stop): never a crash ------------------------------------


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )


def test_a_stop_is_written_down_before_the_signal_and_is_no_crash(tmp_path):
    from statekeeper.airflow.supervision.probe import observe
    from statekeeper.airflow.supervision.process import stop_app
    from statekeeper.airflow.supervision.stops import STAY_STOPPED, read_intended_stops

    proc = _sleeper()
    status_file = tmp_path / "app" / "status.json"
    ident = AppProcessIdentity.of_launched("a", proc.pid, T0, "log", str(status_file), ["x"])
    try:
        assert ident.intended_stop() is None
        result = stop_app(ident, 10, by="action=stop (run r1)", then=STAY_STOPPED)
        proc.wait(10)
    finally:
        proc.kill()
    assert result.outcome == "graceful"
    [stop] = read_intended_stops(status_file.parent)
    launch = (proc.pid, ident.process.start_ticks, STAY_STOPPED)
    assert (stop.pid, stop.start_ticks, stop.then) == launch
    assert ident.intended_stop() == stop
    # Another launch with the same pid (a reused pid) is not excused by this record.
    other = AppProcessIdentity.from_json({**ident.to_json(), "start_ticks": 1})
    assert other.intended_stop() is None

    obs = observe(str(status_file), T0, 1.0, ident)
    assert obs.process_alive is False and obs.intended_stop == stop.to_json()
    [v] = HealthMonitor(SupervisionConfig(), T0).observe(obs)
    assert v.kind == "intended_stop"
    assert v.reason.startswith("stopped as intended by action=stop (run r1) at ")
    crash = observe(str(status_file), T0, 1.0, other)
    assert [x.kind for x in HealthMonitor(SupervisionConfig(), T0).observe(crash)] == [
        "process_gone"
    ]


def test_intended_stops_keep_the_recent_launches_newest_first(tmp_path):
    from statekeeper.airflow.supervision.stops import (
        KEEP,
        RELAUNCH,
        intended_stop_of,
        read_intended_stops,
        record_intended_stop,
    )

    for pid in range(KEEP + 3):
        record_intended_stop(tmp_path, pid, 100 + pid, by="platform down", then=RELAUNCH)
    stops = read_intended_stops(tmp_path)
    assert [s.pid for s in stops] == list(range(KEEP + 2, 2, -1))
    assert intended_stop_of(tmp_path, KEEP + 2, 100 + KEEP + 2).by == "platform down"
    assert intended_stop_of(tmp_path, 0, 100) is None  # dropped: older than the KEEP newest
    with pytest.raises(ValueError, match="then='later'"):
        record_intended_stop(tmp_path, 1, 1, by="x", then="later")
    (tmp_path / "intended_stop.json").write_text("{not json")
    assert read_intended_stops(tmp_path) == []


def test_relaunches_after_intended_stops_never_count_towards_failed():
    cfg = SupervisionConfig(max_restarts=1, restart_window_s=100)
    record = SupervisionRecord("a", restarts=[], relaunches=[{"at": T0 - i} for i in range(9)])
    assert decide_restart(cfg, record.restarts, T0).action == "restart"
    assert SupervisionRecord.from_json("a", record.to_json()) == record


# -- start-up limits: REBALANCING and RESTORING ----------------------------------------------


def _progress(restored, at):
    return {"updated_at": T0 + at, "stores": {"counts": {"restored": restored, "done": False}}}


def test_rebalancing_past_its_limit_with_input_pending_is_a_hang_idle_is_not():
    cfg = SupervisionConfig(rebalance_timeout_s=60, heartbeat_timeout_s=1e6, lag_growth_checks=0)
    hung = HealthMonitor(cfg, T0)
    assert hung.observe(_obs(50, _status("REBALANCING", lags=(300,), state_since=T0))) == []
    [v] = hung.observe(_obs(61, _status("REBALANCING", lags=(300,), state_since=T0)))
    assert v.kind == "rebalancing_timeout"
    assert v.reason.startswith("hung in REBALANCING for 61s with 300 records pending")
    # Judged by the app's own state_since: a new watch (a new monitor) sees the whole hang.
    [v] = HealthMonitor(cfg, T0 + 100).observe(
        _obs(101, {**_status("REBALANCING", lags=(3,)), "state_since": T0})
    )
    assert v.kind == "rebalancing_timeout"
    unknown = {**_status("REBALANCING", state_since=T0), "task_live": {"0_0": {}}}
    [v] = HealthMonitor(cfg, T0).observe(_obs(90, unknown))
    assert "its source lag still unknown" in v.reason
    # Nothing pending: an idle app waiting for input is not hung.
    idle = HealthMonitor(cfg, T0)
    assert idle.observe(_obs(1000, _status("REBALANCING", lags=(0, 0), state_since=T0))) == []
    # Restore progress (lost batches replayed at start) keeps it alive.
    busy = HealthMonitor(cfg, T0)
    status = _status("REBALANCING", lags=(9,), state_since=T0)
    status["task_live"]["0_0"]["restore_progress"] = _progress(500, 80)
    assert busy.observe(_obs(100, status)) == []


def test_restoring_must_advance_its_restore_progress():
    cfg = SupervisionConfig(restore_timeout_s=60, heartbeat_timeout_s=1e6, lag_growth_checks=0)
    monitor = HealthMonitor(cfg, T0)

    def restoring(restored, progress_at):
        status = _status("RESTORING", lags=(50,), state_since=T0)
        status["task_live"]["0_0"]["restore_progress"] = _progress(restored, progress_at)
        return status

    assert monitor.observe(_obs(30, restoring(100, 20))) == []
    assert monitor.observe(_obs(70, restoring(200, 65))) == []  # advancing
    assert monitor.observe(_obs(120, restoring(200, 65))) == []  # 50 s without progress
    [v] = monitor.observe(_obs(131, restoring(200, 65)))
    assert v.kind == "restore_stalled"
    assert "restore progress stuck at 200 records for 61s" in v.reason
    # No progress file at all (e.g. waiting for a task lock): judged from state_since.
    [v] = HealthMonitor(cfg, T0).observe(_obs(61, _status("RESTORING", state_since=T0)))
    assert v.kind == "restore_stalled" and v.reason.startswith("RESTORING for 61s")


# -- what people see: the summary of the supervision record --------------------------------


def test_summary_counts_restarts_in_the_window_and_names_failed_with_its_remedy(tmp_path):
    from statekeeper.airflow.supervision.summary import (
        is_bad,
        read_supervision_file,
        summarize,
        write_supervision_file,
    )

    cfg = SupervisionConfig(restart_window_s=100, max_restarts=3)
    identity = {"pid": 42, "launched_at": T0 - 30}
    record = SupervisionRecord(
        "wc",
        identity=identity,
        restarts=[
            {"at": T0 - 500, "reason": "old"},
            {"at": T0 - 40, "reason": "process gone: pid 7 exited", "kinds": ["process_gone"]},
        ],
        relaunches=[{"at": T0 - 20, "by": "platform down"}],
    )
    write_supervision_file(tmp_path, record, cfg)
    doc = read_supervision_file(tmp_path)
    status = _status(started_at=T0 - 29)
    row = summarize("wc", doc, status, process_alive=True, now=T0)
    assert row["condition"] == "RUNNING" and row["uptime_s"] == 30 and not is_bad(row)
    assert (row["restarts_in_window"], row["max_restarts"], row["relaunches_in_window"]) == (
        1,
        3,
        1,
    )
    assert row["last_restart"]["reason"] == "process gone: pid 7 exited"
    # An older launch's status is not this launch's state.
    assert (
        summarize("wc", doc, _status(started_at=T0 - 60), process_alive=True, now=T0)["condition"]
        == "LAUNCHING"
    )
    assert summarize("wc", doc, status, process_alive=False, now=T0)["condition"] == "DOWN"
    failed = {**doc, "identity": None, "failed": {"at": T0, "reasons": "r", "explanation": "e"}}
    row = summarize("wc", failed, None, process_alive=False, now=T0)
    assert row["condition"] == "FAILED" and is_bad(row)
    assert (
        "action=restart" in row["failed"]["remedy"]
        and "statekeeper_app_actions" in (row["failed"]["remedy"])
    )
    stopped = {**doc, "identity": None, "stopped": {"at": T0}}
    assert summarize("wc", stopped, None, process_alive=False, now=T0)["condition"] == "STOPPED"
    assert summarize("wc", None, None, process_alive=None, now=T0)["condition"] == (
        "NOT SUPERVISED"
    )


def test_an_idle_start_settles_into_running_without_a_batch():
    """What the driver's supervise loop calls: REBALANCING → RUNNING once the query runs
    and nothing is pending (as Kafka Streams goes RUNNING when nothing needs restoring)."""
    from statekeeper.app.lifecycle import AppState, AppStateMachine, settle_idle_start
    from statekeeper.app.status import StatusBoard

    board = StatusBoard("a")
    machine = AppStateMachine([lambda new, _old: board.update(state=new.value)])
    machine.transition(AppState.REBALANCING)
    since = board.snapshot()["state_since"]
    assert not settle_idle_start(machine, query_started=True, caught_up=False)
    assert not settle_idle_start(machine, query_started=False, caught_up=True)
    assert settle_idle_start(machine, query_started=True, caught_up=True)
    doc = board.snapshot()
    assert doc["state"] == "RUNNING" and doc["state_since"] >= since
    # Anywhere else it changes nothing (a batch that began meanwhile moved it on).
    other = AppStateMachine()
    other.transition(AppState.REBALANCING)
    other.transition(AppState.RESTORING)
    assert not settle_idle_start(other, query_started=True, caught_up=True)
    assert other.state is AppState.RESTORING
    assert not other.transition_from(AppState.REBALANCING, AppState.RUNNING)
