"""The executor's service process (statekeeper.worker.service_process) without Spark: it
hosts the services while the process it watches (the executor's JVM) runs, one of two
started at once hosts, and it ends when the watched process ends."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statekeeper.cluster.executor import ExecutorIdentity, executor_dir
from statekeeper.process_identity import ProcessIdentity
from statekeeper.settings import load_settings
from statekeeper.worker import service_process
from statekeeper.worker.service_process import (
    SPEC_FILE,
    TOPOLOGY_FILE,
    _started,
    start_service_process,
)
from statekeeper.worker.task_runner import settings_to_json


def _spec(tmp_path: Path, watched: int) -> Path:
    settings = load_settings(
        bootstrap_servers="127.0.0.1:9",  # never reached: no standbys, no query yet
        state_dir=tmp_path / "state",
        application_id="svc",
        query_port=0,
    )
    folder = executor_dir(settings.state_dir, settings.application_id)
    folder.mkdir(parents=True)
    (folder / TOPOLOGY_FILE).write_bytes(pickle.dumps(None))
    spec = {
        "settings": settings_to_json(settings),
        "state_dir": str(settings.state_dir),
        "executor": {"executor_id": "7", "host": "127.0.0.1", "jvm_pid": watched},
        "jvm": ProcessIdentity.of(watched).to_json(),
        "sys_path": [],
    }
    path = folder / SPEC_FILE
    path.write_text(json.dumps(spec))
    return path


def _report(spec: Path) -> dict | None:
    try:
        return json.loads(spec.with_name("report.json").read_text())
    except (OSError, ValueError):
        return None


def test_one_of_two_hosts_and_it_ends_with_the_watched_process(tmp_path: Path) -> None:
    jvm = subprocess.Popen(["sleep", "60"])
    spec = _spec(tmp_path, jvm.pid)
    command = [sys.executable, "-m", "statekeeper.worker.service_process", str(spec)]
    first = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    second = None
    try:
        deadline = time.monotonic() + 30
        while (_report(spec) or {}).get("pid") != first.pid:
            assert time.monotonic() < deadline and first.poll() is None, first.stderr
            time.sleep(0.1)
        assert (_report(spec) or {})["query"]["port"] > 0
        # A second one finds the host lock taken and exits at once.
        second = subprocess.run(command, capture_output=True, text=True, timeout=30)
        assert second.returncode == 0 and first.poll() is None
        jvm.kill()
        jvm.wait()
        assert first.wait(15) == 0
        _, err = first.communicate()
        assert f"its JVM (pid {jvm.pid}) ended; services stop" in err
    finally:
        jvm.kill()
        first.kill()


def test_a_task_hands_the_host_lock_to_the_process_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No window in which a second task could start another: the lock is taken before the
    process starts and held by it from then on. A worker starts one at most every
    RESTART_AFTER_S, so one that fails at its start is not started by every batch."""
    monkeypatch.setattr(service_process, "RESTART_AFTER_S", 0.0)
    jvm = subprocess.Popen(["sleep", "60"])
    settings = load_settings(
        bootstrap_servers="127.0.0.1:9",
        state_dir=tmp_path / "state",
        application_id="svc",
        query_port=0,
        executor_services_process=True,
    )
    executor = ExecutorIdentity("7", "127.0.0.1", jvm.pid)
    spec = executor_dir(settings.state_dir, settings.application_id) / SPEC_FILE
    try:
        assert start_service_process(settings, settings.state_dir, executor, None)
        child = _started[-1]
        assert not start_service_process(settings, settings.state_dir, executor, None)
        deadline = time.monotonic() + 30
        while (_report(spec) or {}).get("pid") != child.pid:
            assert time.monotonic() < deadline and child.poll() is None
            time.sleep(0.1)
        jvm.kill()
        jvm.wait()
        assert child.wait(15) == 0
        # The lock went with the process: the next task starts a new one (which finds the
        # JVM gone and ends too), but not again at once.
        assert start_service_process(settings, settings.state_dir, executor, None)
        assert _started[-1].wait(15) == 0
        monkeypatch.setattr(service_process, "RESTART_AFTER_S", 60.0)
        assert not start_service_process(settings, settings.state_dir, executor, None)
    finally:
        jvm.kill()
        for process in _started:
            process.kill()
