"""The executors' side of placement: which executor a process belongs to and where its state
lives, the share each Spark task takes (only shares placed on its executor, each once per
job), the published assignment a parked task checks before committing what it holds, and
``ParkedTask.commit_held`` dropping a moved task's held batches. No Spark, no broker."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from statekeeper.cluster.executor import (
    DRIVER_EXECUTOR_ID,
    EXECUTOR_STATE_DIR_ENV,
    executor_dir,
    executor_of_process,
    executor_state_dir,
    java_ancestor,
)
from statekeeper.kafka.model import OffsetRange
from statekeeper.placement.assignment import Assignment, TaskPlacement
from statekeeper.placement.published import (
    publish_assignment,
    read_assignment,
    still_placed_here,
)
from statekeeper.placement.shares import take_share
from statekeeper.state.task_id import TaskId
from statekeeper.worker.parked_tasks import ParkedTask
from statekeeper.worker.task_run import TaskRun

APP = "placed"


# -- executor identity and state directory ----------------------------------------------------


@pytest.fixture
def fake_executor_jvm():
    """A process started like Spark's executor JVM (``--executor-id 7 --hostname h7``) with
    a child, as a Python daemon is."""
    child_code = "import subprocess, sys, time; time.sleep(60)"
    parent_code = (
        "import subprocess, sys; "
        f"c = subprocess.Popen([sys.executable, '-c', {child_code!r}]); "
        "print(c.pid, flush=True); c.wait()"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code, "--executor-id", "7", "--hostname", "h7"],
        stdout=subprocess.PIPE,
        text=True,
    )
    child = int(parent.stdout.readline())
    try:
        yield parent.pid, child
    finally:
        os.kill(child, signal.SIGKILL)  # the parent then returns from wait()
        parent.wait(timeout=10)


def test_a_process_under_an_executor_jvm_belongs_to_that_executor(fake_executor_jvm):
    jvm, worker = fake_executor_jvm
    identity = executor_of_process(worker)
    assert (identity.executor_id, identity.host, identity.jvm_pid) == ("7", "h7", jvm)
    assert identity.name == "7"
    assert executor_of_process(jvm).executor_id == "7"


def test_a_process_under_no_executor_jvm_is_the_driver():
    identity = executor_of_process(os.getpid())
    assert (identity.executor_id, identity.jvm_pid) == (DRIVER_EXECUTOR_ID, 0)
    assert executor_of_process(2**22 + 12345).executor_id == DRIVER_EXECUTOR_ID  # no such pid


def test_the_nearest_java_ancestor_is_found_as_the_local_drivers_jvm():
    """What a service process watches in local mode: its worker's nearest Java ancestor (a
    process named ``java`` here, as the driver's JVM is)."""
    child_code = "import time; time.sleep(60)"
    parent_code = (
        "import subprocess, sys; open('/proc/self/comm', 'w').write('java'); "
        f"c = subprocess.Popen([sys.executable, '-c', {child_code!r}]); "
        "print(c.pid, flush=True); c.wait()"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True
    )
    child = int(parent.stdout.readline())
    try:
        assert java_ancestor(child) == parent.pid
        assert java_ancestor(parent.pid) is None  # itself is not its own ancestor
        assert java_ancestor(os.getpid()) is None and java_ancestor(2**22 + 12345) is None
    finally:
        os.kill(child, signal.SIGKILL)
        parent.wait(timeout=10)


def test_the_executor_state_dir_comes_from_the_environment_first(tmp_path, monkeypatch):
    monkeypatch.delenv(EXECUTOR_STATE_DIR_ENV, raising=False)
    assert executor_state_dir(tmp_path / "default") == tmp_path / "default"
    monkeypatch.setenv(EXECUTOR_STATE_DIR_ENV, str(tmp_path / "exec-2"))
    assert executor_state_dir(tmp_path / "default") == tmp_path / "exec-2"
    monkeypatch.setenv(EXECUTOR_STATE_DIR_ENV, "")  # empty: not set
    assert executor_state_dir(tmp_path / "default") == tmp_path / "default"


# -- shares ---------------------------------------------------------------------------------


def _run(task_id: str, executor: str | None, epoch: int = 1) -> TaskRun:
    partition = TaskId.parse(task_id).partition
    ranges = (OffsetRange("in", partition, 0, 10),)
    return TaskRun(task_id, 0, partition, ranges, 0, 0, executor=executor, epoch=epoch)


def _shares() -> list[list[TaskRun]]:
    """Shares 0 and 2 on executor "1", 1 and 3 on executor "2"."""
    return [
        [_run("0_0", "1"), _run("0_4", "1")],
        [_run("0_1", "2")],
        [_run("0_2", "1")],
        [_run("0_3", "2")],
    ]


def _ids(share: list[TaskRun]) -> list[str]:
    return [r.task_id for r in share]


def test_a_spark_task_takes_its_own_share_when_it_is_placed_on_its_executor(tmp_path):
    shares = _shares()
    assert _ids(take_share(2, shares, "job", "1", tmp_path, APP)) == ["0_2"]
    assert _ids(take_share(0, shares, "job", "1", tmp_path, APP)) == ["0_0", "0_4"]
    assert take_share(0, shares, "job", "1", tmp_path, APP) == []  # all of "1" taken


def test_a_spark_task_takes_the_first_free_share_of_its_executor_else_nothing(tmp_path):
    shares = _shares()
    # Index 1 is executor "2"'s share: a Spark task on "1" takes one of "1"'s instead.
    assert _ids(take_share(1, shares, "job", "1", tmp_path, APP)) == ["0_0", "0_4"]
    assert _ids(take_share(3, shares, "job", "1", tmp_path, APP)) == ["0_2"]
    assert take_share(5, shares, "job", "1", tmp_path, APP) == []
    # Executor "2"'s shares are still there for its own Spark tasks.
    assert _ids(take_share(0, shares, "job", "2", tmp_path, APP)) == ["0_1"]
    assert _ids(take_share(0, shares, "job", "2", tmp_path, APP)) == ["0_3"]
    # An executor with nothing placed on it runs nothing (and does not touch the disk).
    assert take_share(0, shares, "job", "3", tmp_path / "elsewhere", APP) == []
    assert not (tmp_path / "elsewhere").exists()


def test_shares_are_taken_once_per_job(tmp_path):
    shares = _shares()
    assert _ids(take_share(2, shares, "job-a", "1", tmp_path, APP)) == ["0_2"]
    assert _ids(take_share(2, shares, "job-b", "1", tmp_path, APP)) == ["0_2"]  # a new pass


def test_unplaced_runs_are_taken_anywhere(tmp_path):
    shares = [[_run("0_0", None)], [_run("0_1", None)]]
    assert _ids(take_share(1, shares, "job", "9", tmp_path, APP)) == ["0_1"]
    assert _ids(take_share(1, shares, "job", "driver", tmp_path, APP)) == ["0_0"]


def _take_in_process(args: tuple) -> list[str]:
    index, shares, state_dir = args
    return _ids(take_share(index, shares, "race", "1", Path(state_dir), APP))


def test_concurrent_spark_tasks_of_one_executor_take_each_share_once(tmp_path):
    shares = [[_run(f"0_{p}", "1" if p % 3 else "2")] for p in range(12)]
    # spawn, not fork: forking a test process with other threads running (Kafka clients of
    # other tests) can leave a child stuck on a lock copied mid-use (it hung a make test).
    with multiprocessing.get_context("spawn").Pool(6) as pool:
        work = [(i, shares, str(tmp_path)) for i in range(16)]
        taken = pool.map_async(_take_in_process, work).get(timeout=120)
    ran = [t for share in taken for t in share]
    placed_on_1 = [r.task_id for share in shares for r in share if r.executor == "1"]
    assert sorted(ran) == sorted(placed_on_1)  # each once, none of executor "2"


# -- the published assignment and the parked task's check -----------------------------------


def _assignment(version: int, active: str = "1", epoch: int = 1) -> Assignment:
    return Assignment(APP, version, {"0_0": TaskPlacement(active, ("2",), epoch)})


def test_publish_keeps_a_newer_version_on_disk(tmp_path):
    assert read_assignment(tmp_path, APP) is None
    publish_assignment(tmp_path, _assignment(3))
    assert read_assignment(tmp_path, APP) == _assignment(3)
    publish_assignment(tmp_path, _assignment(2, active="2"))  # a late Spark task's older copy
    assert read_assignment(tmp_path, APP) == _assignment(3)
    publish_assignment(tmp_path, _assignment(4, active="2", epoch=2))
    assert read_assignment(tmp_path, APP) == _assignment(4, active="2", epoch=2)
    assert [p.name for p in (tmp_path / APP / ".executor").iterdir()] == ["assignment.json"]


def test_an_unreadable_published_assignment_reads_as_none(tmp_path):
    publish_assignment(tmp_path, _assignment(1))
    (tmp_path / APP / ".executor" / "assignment.json").write_text("{not json")
    assert read_assignment(tmp_path, APP) is None


def teststill_placed_here_while_no_assignment_is_published(tmp_path):
    assert still_placed_here(tmp_path, APP, "0_0", "1", 1)()


def teststill_placed_here_follows_the_published_assignment(tmp_path):
    check = still_placed_here(tmp_path, APP, "0_0", "1", 1)
    publish_assignment(tmp_path, _assignment(1))
    assert check()
    publish_assignment(tmp_path, _assignment(2, active="2", epoch=2))  # moved away
    assert not check()
    publish_assignment(tmp_path, _assignment(3, active="1", epoch=3))  # back, newer epoch
    assert not check()
    assert still_placed_here(tmp_path, APP, "0_0", "1", 3)()
    # A task the assignment does not name (yet) is not taken away.
    assert still_placed_here(tmp_path, APP, "1_0", "1", 1)()


class StubTransaction:
    def __init__(self) -> None:
        self.commits = 0

    def commit(self) -> None:
        self.commits += 1


class StubState:
    """What ParkedTask.commit_held and close need of a task state."""

    task_id = "0_0"
    specs: list = []

    def __init__(self, transaction: StubTransaction | None) -> None:
        self.transaction = transaction
        self.closed = False

    def pending_transaction(self) -> StubTransaction | None:
        return self.transaction

    def close(self) -> None:
        self.closed = True


def test_commit_held_commits_while_the_task_is_placed_here():
    transaction = StubTransaction()
    ParkedTask(StubState(transaction), None, epoch=1, still_placed_here=lambda: True).commit_held()
    assert transaction.commits == 1
    ParkedTask(StubState(transaction), None).commit_held()  # no check (single process)
    assert transaction.commits == 2
    ParkedTask(StubState(None), None, still_placed_here=lambda: True).commit_held()  # nothing held


def test_commit_held_drops_the_held_batches_of_a_task_that_moved_away(tmp_path, caplog):
    transaction = StubTransaction()
    state = StubState(transaction)
    parked = ParkedTask(
        state, None, epoch=1, still_placed_here=still_placed_here(tmp_path, APP, "0_0", "1", 1)
    )
    publish_assignment(tmp_path, _assignment(5, active="2", epoch=2))
    parked.commit_held()
    assert transaction.commits == 0
    assert "moved away" in caplog.text
    parked.close()
    assert state.closed


def test_a_new_app_run_replaces_the_last_run_assignment_on_disk(tmp_path):
    # State directories outlive an app run, and so does the assignment published there; a
    # restarted driver numbers its assignments from 1 again. The last run's higher version
    # must not hide the new run's placement (its epochs, standbys and query endpoints).
    from statekeeper.placement.registry import TaskPlacementRegistry

    last_run = TaskPlacementRegistry(APP)
    for alive in (["1", "2"], ["2"], ["1", "2"], ["1"], ["1", "2"]):
        publish_assignment(tmp_path, last_run.plan(["0_0", "0_1"], alive))
    assert read_assignment(tmp_path, APP).version == 5
    new_run = TaskPlacementRegistry(APP)
    first = new_run.plan(["0_0", "0_1"], ["1", "2"])
    publish_assignment(tmp_path, first)
    assert read_assignment(tmp_path, APP) == first
    placed_on_1 = next(t for t, p in first.tasks.items() if p.active == "1")
    assert still_placed_here(tmp_path, APP, placed_on_1, "1", 1)()
    # Within the new run, a late Spark task's older copy is still ignored.
    second = new_run.plan(["0_0", "0_1"], ["1", "2", "3"])
    publish_assignment(tmp_path, second)
    publish_assignment(tmp_path, first)
    assert read_assignment(tmp_path, APP) == second


class RecordingComponent:
    """An executor component that keeps the assignments it is given."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, int]] = []

    def reconcile(self, assignment: Assignment) -> None:
        self.seen.append((assignment.run_id, assignment.version))

    def report(self) -> dict:
        return {}

    def close(self) -> None:
        pass


def _wait_for(condition, timeout_s: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_services_host_reconciles_a_new_run_assignment_of_the_same_version(
    tmp_path, monkeypatch
):
    from statekeeper.cluster.executor import ExecutorIdentity
    from statekeeper.settings import StatekeeperSettings
    from statekeeper.worker import executor_services

    component = RecordingComponent()
    monkeypatch.setattr(executor_services, "_components", lambda *a: {"fake": component})
    settings = StatekeeperSettings(
        bootstrap_servers="127.0.0.1:1", application_id=APP, state_dir=tmp_path, status_port=None
    )
    folder = executor_dir(tmp_path, APP)
    folder.mkdir(parents=True)
    fd = os.open(folder / "host.lock", os.O_RDWR | os.O_CREAT, 0o644)
    host = executor_services.ExecutorServicesHost(
        settings, tmp_path, ExecutorIdentity("1", "h1", 0), fd
    )
    try:
        publish_assignment(tmp_path, Assignment(APP, 1, run_id="run-a"))
        _wait_for(lambda: component.seen == [("run-a", 1)])
        publish_assignment(tmp_path, Assignment(APP, 1, run_id="run-b"))  # a restarted driver
        _wait_for(lambda: component.seen == [("run-a", 1), ("run-b", 1)])
        _wait_for(
            lambda: (
                (executor_services.read_report(tmp_path, APP) or {}).get("assignment_version") == 1
            )
        )
    finally:
        host.close()
