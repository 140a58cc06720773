"""A child app started with child_env() dies when its parent is killed (kill -9 included)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from statekeeper.app.child_process import DIE_WITH_PARENT_ENV, child_env, die_with_parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux")

# The parent starts the child (as AppProcess does) and prints its pid, then waits to be killed.
PARENT = """
import subprocess, sys, time
from statekeeper.app.child_process import child_env
child = subprocess.Popen(
    [sys.executable, "-c", sys.argv[1]], env=child_env(), start_new_session=True
)
print(child.pid, flush=True)
time.sleep(120)
"""
CHILD = """
import os, time
from statekeeper.app.child_process import die_with_parent
assert die_with_parent()
assert "STATEKEEPER_DIE_WITH_PARENT" not in os.environ
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (an orphaned zombie that init has not reaped yet does not)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def test_a_child_app_dies_when_its_parent_is_killed() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, CHILD], stdout=subprocess.PIPE, text=True
    )
    try:
        child = int(parent.stdout.readline())  # type: ignore[union-attr]
        time.sleep(1.0)  # the child has asked to die with its parent
        assert _alive(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        parent.kill()
        parent.wait(10)


def test_without_the_variable_nothing_is_arranged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DIE_WITH_PARENT_ENV, raising=False)
    assert die_with_parent() is False


def test_child_env_names_this_process() -> None:
    assert child_env({"A": "1"}) == {"A": "1", DIE_WITH_PARENT_ENV: str(os.getpid())}
