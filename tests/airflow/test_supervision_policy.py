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
    with pytest.raises(ConfigError, match=r"from spec a.yaml: unknown \['stall_s'\]"):
        supervision_config(("spec a.yaml", {"stall_s": 3}))
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
