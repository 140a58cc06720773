"""TaskTransaction against the real broker and RocksDB: a crash at every point of a commit,
then a reopen (a new StateEnvironment on the same directory, and again from the changelogs
alone) finds each task exactly at its last commit or exactly at the new batch, never a mix;
group commits; after-commit hooks once per successful commit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from statekeeper.state.transaction import (
    CommittedBatch,
    TaskTransaction,
    TransactionState,
    commit_group,
)

from .task_transactions import (
    CRASH_POINTS,
    ROLLS_FORWARD,
    Crash,
    contents,
    environment,
    expected,
    install_crash,
    open_tasks,
    run_killed,
    source_offsets,
    write_batch,
)


def _raise() -> None:
    raise Crash("crash point")


def _check_restored(bootstrap: str, state_dir: Path, app: str, batches: dict[int, int]) -> None:
    """Reopen the tasks in a new environment on ``state_dir`` and check each holds exactly
    its batch in ``batches`` (partition -> batch); each then commits its next batch, which a
    restore from the changelogs alone finds (no uncommitted tail left to pick up)."""
    partitions = sorted(batches)
    env = environment(bootstrap, state_dir, app)
    try:
        tasks = open_tasks(env, partitions)
        try:
            committed: list[CommittedBatch] = []
            group = []
            for task in tasks:
                batch = batches[task.partition]
                assert contents(task) == expected(task.partition, batch), task.task_id
                assert task.last_batch_id == batch
                assert task.committed_offsets == source_offsets(task.partition, batch)
                task.add_after_commit_hook(committed.append)
                write_batch(task, batch + 1)
                offsets = source_offsets(task.partition, batch + 1)
                group.append(TaskTransaction(task, batch + 1, offsets))
            commit_group(group)
            assert sorted(c.task_id for c in committed) == sorted(t.task_id for t in tasks)
        finally:
            for task in tasks:
                task.close()
        shutil.rmtree(state_dir)
        tasks = open_tasks(env, partitions)
        try:
            for task in tasks:
                assert contents(task) == expected(task.partition, batches[task.partition] + 1)
        finally:
            for task in tasks:
                task.close()
    finally:
        env.close()


@pytest.mark.parametrize("point", CRASH_POINTS)
def test_a_crash_inside_a_commit_leaves_one_batch_or_the_other(broker, tmp_path, topic_name, point):
    state_dir = tmp_path / "state"
    env = environment(broker.bootstrap_servers, state_dir, topic_name)
    (task,) = open_tasks(env, [0])
    committed: list[CommittedBatch] = []
    task.add_after_commit_hook(committed.append)
    try:
        write_batch(task, 0)
        task.commit(0, source_offsets(0, 0))
        install_crash(env, [task], point, _raise)
        write_batch(task, 1)
        transaction = TaskTransaction(task, 1, source_offsets(0, 1))
        with pytest.raises(Crash):
            transaction.commit()
        assert transaction.state is TransactionState.FAILED and task.broken
        assert [c.batch_id for c in committed] == [0]  # never for the failed commit
        first = committed[0]
        assert first.source_offsets == source_offsets(0, 0)
        assert set(first.marker_offsets) == {"kv", "totals", "mem"}
    finally:
        task.close()
        env.close()
    new = point in ROLLS_FORWARD
    _check_restored(broker.bootstrap_servers, state_dir, topic_name, {0: 1 if new else 0})


# The group's three outcomes: every task at its last commit, the first task's marker written
# (that task forward, the other back), every task forward with one store written.
@pytest.mark.parametrize("point", ["produced", "mid-markers", "mid-stores"])
def test_a_crash_inside_a_group_commit_leaves_each_task_at_one_batch(
    broker, tmp_path, topic_name, point
):
    state_dir = tmp_path / "state"
    env = environment(broker.bootstrap_servers, state_dir, topic_name)
    tasks = open_tasks(env, [0, 1])
    try:
        for task in tasks:
            write_batch(task, 0)
        commit_group([TaskTransaction(t, 0, source_offsets(t.partition, 0)) for t in tasks])
        install_crash(env, tasks, point, _raise)
        for task in tasks:
            write_batch(task, 1)
        group = [TaskTransaction(t, 1, source_offsets(t.partition, 1)) for t in tasks]
        with pytest.raises(Crash):
            commit_group(group)
        assert all(t.state is TransactionState.FAILED for t in group)
    finally:
        for task in tasks:
            task.close()
        env.close()
    if point == "mid-markers":  # only the first task's first marker was written
        batches = {0: 1, 1: 0}
    else:
        batches = dict.fromkeys((0, 1), 1 if point in ROLLS_FORWARD else 0)
    _check_restored(broker.bootstrap_servers, state_dir, topic_name, batches)


@pytest.mark.parametrize("point", ["produced", "mid-markers", "mid-stores"])
def test_kill9_inside_a_commit_leaves_one_batch_or_the_other(broker, tmp_path, topic_name, point):
    state_dir = tmp_path / "state"
    run_killed(broker.bootstrap_servers, state_dir, topic_name, point)
    new = point in ROLLS_FORWARD
    _check_restored(broker.bootstrap_servers, state_dir, topic_name, {0: 1 if new else 0})


def test_tasks_committed_together_restore_exactly(broker, tmp_path, topic_name):
    state_dir = tmp_path / "state"
    env = environment(broker.bootstrap_servers, state_dir, topic_name)
    tasks = open_tasks(env, range(3))
    calls: list[tuple[str, int]] = []
    for task in tasks:
        task.add_after_commit_hook(lambda c: calls.append((c.task_id, c.batch_id)))
    try:
        for batch in range(3):
            for task in tasks:
                write_batch(task, batch)
                task.mark_processed(batch, source_offsets(task.partition, batch))
            group = [t.pending_transaction() for t in tasks]
            assert None not in group
            commit_group(group)  # type: ignore[arg-type]
            assert {t.state for t in group} == {TransactionState.COMMITTED}  # type: ignore[union-attr]
        assert sorted(calls) == sorted((t.task_id, b) for t in tasks for b in range(3))
        for task in tasks:
            assert task.last_batch_id == 2 and not task.has_uncommitted
            assert task.processed_offsets == source_offsets(task.partition, 2)
    finally:
        for task in tasks:
            task.close()
        env.close()
    _check_restored(broker.bootstrap_servers, state_dir, topic_name, dict.fromkeys(range(3), 2))


def test_tasks_with_their_own_writers_are_committed_one_by_one(broker, tmp_path, topic_name):
    envs = [environment(broker.bootstrap_servers, tmp_path / f"env{n}", topic_name) for n in (0, 1)]
    tasks = [open_tasks(env, [n])[0] for n, env in enumerate(envs)]
    try:
        for task in tasks:
            write_batch(task, 0)
        commit_group([TaskTransaction(t, 0, source_offsets(t.partition, 0)) for t in tasks])
        assert [t.last_batch_id for t in tasks] == [0, 0]
        for task in tasks:
            assert contents(task) == expected(task.partition, 0)
    finally:
        for task in tasks:
            task.close()
        for env in envs:
            env.close()
