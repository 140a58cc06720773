"""PID-file process management: start detached, alive (pid reuse guarded), stop the group,
find and sweep every process carrying the platform's marker."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from statekeeper.platform.processes import (
    MARKER_ENV,
    ProcessRecord,
    processes_of,
    start_process,
    stop_process,
    sweep,
)
from statekeeper.procfs import group_members

# A parent that forks a child in its own group, and one that ignores SIGTERM.
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
STUBBORN = [
    sys.executable,
    "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
]


def _start(tmp_path: Path, name: str, argv: list[str], **env: str) -> ProcessRecord:
    return start_process(
        name,
        argv,
        env={**os.environ, **env},
        log=tmp_path / f"{name}.log",
        pid_file=tmp_path / f"{name}.json",
        cwd=tmp_path,
    )


def test_start_records_and_stop_ends_the_whole_group(tmp_path):
    parent = [
        sys.executable,
        "-c",
        "import subprocess, sys, time;"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']);"
        "time.sleep(600)",
    ]
    record = _start(tmp_path, "svc", parent)
    assert ProcessRecord.read(tmp_path / "svc.json") == record
    deadline = time.monotonic() + 10
    while len(group_members(record.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    members = group_members(record.pid)
    assert len(members) == 2 and record.pid in members
    assert record.alive()
    assert stop_process(record, timeout_s=5) == []  # SIGTERM was enough
    assert not record.alive() and group_members(record.pid) == []


def test_a_reused_pid_is_not_the_recorded_process(tmp_path):
    record = _start(tmp_path, "svc", SLEEPER)
    try:
        assert record.alive()
        reused = replace(record.process, start_ticks=record.process.start_ticks - 1)
        assert not replace(record, process=reused).alive()
    finally:
        stop_process(record, timeout_s=5)


def test_stop_kills_what_ignores_sigterm(tmp_path):
    record = _start(tmp_path, "stubborn", STUBBORN)
    time.sleep(0.5)  # let it install the handler
    assert stop_process(record, timeout_s=1) == [record.pid]
    assert not record.alive()


def test_sweep_finds_marked_processes_in_other_sessions_and_spares_others(tmp_path):
    root = tmp_path / "platform"
    root.mkdir()
    env = {**os.environ, MARKER_ENV: str(root)}
    # Like a detached spark-submit: its own session, launched from a platform process.
    marked = subprocess.Popen(SLEEPER, env=env, start_new_session=True, cwd=tmp_path)
    by_cwd = subprocess.Popen(SLEEPER, start_new_session=True, cwd=root)
    other = subprocess.Popen(SLEEPER, env={**os.environ, MARKER_ENV: f"{root}-other"})
    try:
        found = processes_of(root)
        assert marked.pid in found and by_cwd.pid in found
        assert other.pid not in found and os.getpid() not in found
        assert sorted(sweep(root, timeout_s=5)) == sorted(found)
        assert marked.wait(5) is not None and by_cwd.wait(5) is not None
        assert other.poll() is None
        assert processes_of(root) == []
    finally:
        for proc in (marked, by_cwd, other):
            proc.kill()
            proc.wait()
