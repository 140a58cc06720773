"""Parked task states: kept open with their lock, given up when another opener asks."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from statekeeper.errors import TaskLockedError
from statekeeper.state.directory import TaskDirectory, TaskLock
from statekeeper.worker.parked_tasks import ParkedTasks


class FakeState:
    """What ParkedTasks needs of a TaskStateManager, around a real TaskLock."""

    def __init__(self, directory: TaskDirectory, specs: list[str]) -> None:
        self.specs = specs
        self.lock = TaskLock(directory, timeout_s=5)
        self.lock.acquire()
        self.closed = False

    def release_requested(self) -> bool:
        return self.lock.release_requested()

    def close(self) -> None:
        self.closed = True
        self.lock.release()


@pytest.fixture
def directory(tmp_path: Path) -> TaskDirectory:
    return TaskDirectory(tmp_path, "app", "0_1")


def test_a_parked_state_is_handed_back_once(directory):
    parked = ParkedTasks()
    state = FakeState(directory, ["counts"])
    parked.park("d", state)
    assert parked.take("d", ["counts"]) is state
    assert parked.take("d", ["counts"]) is None
    assert not state.closed
    state.close()


def test_a_state_parked_with_other_stores_is_closed_not_reused(directory):
    parked = ParkedTasks()
    state = FakeState(directory, ["counts"])
    parked.park("d", state)
    assert parked.take("d", ["counts", "windows"]) is None
    assert state.closed


def test_another_opener_gets_the_lock_after_asking(directory):
    parked = ParkedTasks(poll_s=0.005)
    state = FakeState(directory, ["counts"])
    parked.park("d", state)
    started = time.monotonic()
    with TaskLock(directory, timeout_s=5):  # a second opener (another fd)
        waited = time.monotonic() - started
        assert state.closed and len(parked) == 0
        assert not directory.release_request_file.exists()
    assert waited < 1.0


def test_without_a_parked_holder_nobody_releases(directory):
    holder = TaskLock(directory, timeout_s=5)
    holder.acquire()
    try:
        with pytest.raises(TaskLockedError, match="locked by PID"):
            TaskLock(directory, timeout_s=0.2).acquire()
        assert holder.release_requested()  # the request is left for a parked holder
    finally:
        holder.release()


def test_close_all_releases_every_lock(tmp_path):
    parked = ParkedTasks()
    dirs = [TaskDirectory(tmp_path, "app", f"0_{p}") for p in range(3)]
    states = [FakeState(d, []) for d in dirs]
    for d, s in zip(dirs, states, strict=True):
        parked.park(str(d.path), s)
    parked.close_all()
    assert all(s.closed for s in states)
    for d in dirs:
        TaskLock(d, timeout_s=0.5).acquire()
