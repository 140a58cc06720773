"""Several tasks committed together (one flush, one marker round trip) on the real broker."""

from __future__ import annotations

import shutil

import pytest

from statekeeper.settings import load_settings
from statekeeper.state.environment import StateEnvironment
from statekeeper.state.task_state_manager import commit_together
from statekeeper.stores import Stores

SPECS = [
    Stores.persistent("kv").with_serdes("str", "int"),
    Stores.in_memory("mem").with_serdes("str", "int"),
]


def _env(broker, tmp_path, app):
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        state_dir=tmp_path / "state",
        application_id=app,
    )
    env = StateEnvironment(settings)
    env.ensure_changelogs(SPECS, 3)
    return env


def _open(env, hooks=None):
    tasks = []
    for p in range(3):
        task = env.task(f"0_{p}", p, SPECS)
        task.commit_hooks.extend(hooks or [])
        task.open()
        tasks.append(task)
    return tasks


def _write(tasks, batch):
    for p, task in enumerate(tasks):
        for i in range(40):
            for name in ("kv", "mem"):
                task.store(name).put(f"k{p}-{i}", batch * 100 + i)
        task.store("kv").delete(f"k{p}-0")


def _contents(tasks):
    return [{name: dict(task.store(name).all()) for name in ("kv", "mem")} for task in tasks]


def test_tasks_committed_together_restore_exactly(broker, tmp_path, topic_name):
    env = _env(broker, tmp_path, topic_name)
    tasks = _open(env)
    for batch in range(3):
        _write(tasks, batch)
        commit_together([(t, batch, {f"in:{p}": 10 * (batch + 1)}) for p, t in enumerate(tasks)])
    committed = _contents(tasks)
    for p, task in enumerate(tasks):
        assert task.last_batch_id == 2
        assert task.processed_offsets == {f"in:{p}": 30}
        task.close()

    shutil.rmtree(tmp_path / "state")  # everything comes back from the changelogs
    tasks = _open(env)
    try:
        assert _contents(tasks) == committed
        assert all(t.last_batch_id == 2 for t in tasks)
    finally:
        for task in tasks:
            task.close()
        env.close()


def test_a_failed_group_commit_leaves_every_task_at_its_last_commit(
    broker, tmp_path, topic_name
):
    failing = {"on": False}

    def crash_after_markers(step, batch_id):
        if failing["on"] and step == "markers_written":
            raise RuntimeError("crash after the markers")

    env = _env(broker, tmp_path, topic_name)
    tasks = _open(env, [crash_after_markers])
    _write(tasks, 0)
    commit_together([(t, 0, {f"in:{p}": 10}) for p, t in enumerate(tasks)])
    at_batch_0 = _contents(tasks)
    _write(tasks, 1)
    failing["on"] = True
    with pytest.raises(RuntimeError, match="crash after the markers"):
        commit_together([(t, 1, {f"in:{p}": 20}) for p, t in enumerate(tasks)])
    for task in tasks:
        with pytest.raises(Exception, match="previous commit failed"):
            task.commit(2, {})
        task.close()

    # The markers of batch 1 were written after all its records were acknowledged, so a
    # restore rolls every task forward to batch 1; the in-memory stores come back too.
    failing["on"] = False
    tasks = _open(env)
    try:
        assert all(t.last_batch_id == 1 for t in tasks)
        assert _contents(tasks) != at_batch_0
        _write(tasks, 1)  # what batch 1 wrote: the restored state already equals it
        expected = _contents(tasks)
        for task in tasks:
            task.close()
        shutil.rmtree(tmp_path / "state")
        tasks = _open(env)
        assert _contents(tasks) == expected
    finally:
        for task in tasks:
            task.close()
        env.close()


def test_tasks_with_their_own_writers_are_committed_one_by_one(broker, tmp_path, topic_name):
    envs = [_env(broker, tmp_path / f"env{n}", topic_name) for n in range(2)]
    tasks = [envs[0].task("0_0", 0, SPECS), envs[1].task("0_1", 1, SPECS)]
    for task in tasks:
        task.open()
    try:
        _write(tasks, 0)
        commit_together([(t, 4, {f"in:{p}": 7}) for p, t in enumerate(tasks)])
        assert [t.last_batch_id for t in tasks] == [4, 4]
        assert [t.processed_offsets for t in tasks] == [{"in:0": 7}, {"in:1": 7}]
    finally:
        for task in tasks:
            task.close()
        for env in envs:
            env.close()
