"""TaskTransaction's state machine without a broker: real stores (RocksDB, in-memory) and a
writer double that records what a broker would have acknowledged."""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from statekeeper.changelog.records import CommitMarker
from statekeeper.changelog.restorer import RestoreOutcome
from statekeeper.errors import ProduceError, StatekeeperError
from statekeeper.state.directory import TaskDirectory
from statekeeper.state.task_state_manager import TaskStateManager
from statekeeper.state.transaction import (
    COMMIT_STEPS,
    CommittedBatch,
    TaskTransaction,
    TransactionState,
    commit_group,
)
from statekeeper.stores import Stores

SPECS = [
    Stores.persistent("kv").with_serdes("str", "int").with_caching_enabled(1 << 20),
    Stores.in_memory("mem").with_serdes("str", "int"),
    Stores.persistent("local").with_serdes("str", "int").with_logging_disabled(),
]
LOGGED = ("kv", "mem")


class FakeWriter:
    """The ChangelogWriter contract in memory: per-partition logs, a journal of calls, and
    optional failures."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], list[tuple[bytes, bytes | None]]] = defaultdict(list)
        self.journal: list[str] = []
        self.marker_calls: list[list[tuple[str, int, CommitMarker]]] = []
        self.fail_flush = False

    def send(self, topic: str, partition: int, key: bytes, value: bytes | None) -> None:
        self.logs[(topic, partition)].append((key, value))

    def send_all(self, topic: str, partition: int, items: list[tuple[bytes, bytes | None]]) -> None:
        self.logs[(topic, partition)].extend(items)

    def flush(self, timeout_s: float) -> None:
        self.journal.append("changelog flush")
        if self.fail_flush:
            raise ProduceError("changelog records were not acknowledged")

    def write_markers(
        self, markers: list[tuple[str, int, CommitMarker]], timeout_s: float
    ) -> dict[tuple[str, int], int]:
        self.journal.append("markers")
        self.marker_calls.append(list(markers))
        offsets = {}
        for topic, partition, marker in markers:
            log = self.logs[(topic, partition)]
            log.append((b"marker", marker.encode()))
            offsets[(topic, partition)] = len(log) - 1
        return offsets


class NoChangelogRestorer:
    """Every changelog is empty: stores open as they are on disk."""

    def restore_all(self, jobs: list[Any]) -> list[RestoreOutcome]:
        return [RestoreOutcome(job, 0, None, None) for job in jobs]


class Outputs:
    """An output producer double: records each flush, optionally fails it."""

    def __init__(self, journal: list[str], fail: bool = False) -> None:
        self.journal, self.fail = journal, fail

    def flush(self, timeout_s: float) -> None:
        self.journal.append("outputs flush")
        if self.fail:
            raise ProduceError("producing output failed")


def _task(
    tmp_path: Path, writer: FakeWriter, task_id: str = "0_0", partition: int = 0
) -> TaskStateManager:
    task = TaskStateManager(
        application_id="app",
        task_id=task_id,
        partition=partition,
        specs=SPECS,
        task_dir=TaskDirectory(tmp_path, "app", task_id),
        writer=writer,  # type: ignore[arg-type]
        restorer=NoChangelogRestorer(),  # type: ignore[arg-type]
        lock_timeout_s=1,
    )
    task.open()
    return task


@pytest.fixture
def writer() -> FakeWriter:
    return FakeWriter()


@pytest.fixture
def task(tmp_path: Path, writer: FakeWriter) -> Any:
    task = _task(tmp_path, writer)
    yield task
    task.close()


def _write(task: TaskStateManager, batch: int) -> None:
    for name in ("kv", "mem", "local"):
        task.store(name).put("k", batch)


def _steps(task: TaskStateManager) -> list[TransactionState]:
    seen: list[TransactionState] = []
    task.commit_hooks.append(lambda step, _batch: seen.append(step))
    return seen


def _fail_at(task: TaskStateManager, at: TransactionState) -> None:
    def hook(step: TransactionState, batch_id: int) -> None:
        if step == at:
            raise RuntimeError(f"crash at {step}")

    task.commit_hooks.append(hook)


def test_a_commit_passes_every_step_in_order(task, writer):
    steps = _steps(task)
    outputs = Outputs(writer.journal)
    _write(task, 1)
    transaction = TaskTransaction(task, 1, {"in:0": 10})
    assert transaction.state is TransactionState.OPEN
    transaction.commit([outputs])

    assert transaction.state is TransactionState.COMMITTED
    assert steps == list(COMMIT_STEPS)
    # Outputs and changelog records are acknowledged before any marker is written.
    assert writer.journal[-1] == "markers"
    assert {"outputs flush", "changelog flush"} <= set(writer.journal[:-1])
    (markers,) = writer.marker_calls
    assert sorted(m.store for _, _, m in markers) == sorted(LOGGED)
    assert all(m.batch_id == 1 and m.source_offsets == {"in:0": 10} for _, _, m in markers)
    for name in LOGGED:
        meta = task.store(name).read_metadata()
        assert (meta.batch_id, meta.source_offsets) == (1, {"in:0": 10})
        assert meta.changelog_offset is not None
    assert task.last_batch_id == 1 and task.committed_offsets == {"in:0": 10}
    assert "app-kv-changelog 0" in task.task_dir.checkpoint_file.read_text()


def test_step_names_are_the_hook_names():
    names = ["flushed", "produced", "marked", "stored", "committed"]
    assert [str(s) for s in COMMIT_STEPS] == names
    assert TransactionState.MARKED == "marked"


def test_a_transaction_commits_once(task):
    _write(task, 1)
    transaction = TaskTransaction(task, 1, {"in:0": 10})
    transaction.commit()
    with pytest.raises(StatekeeperError, match="commits once"):
        transaction.commit()
    assert transaction.state is TransactionState.COMMITTED
    assert not task.broken


@pytest.mark.parametrize("at", COMMIT_STEPS, ids=str)
def test_a_failed_step_fails_the_transaction_and_breaks_the_task(tmp_path, task, writer, at):
    committed: list[CommittedBatch] = []
    task.add_after_commit_hook(committed.append)
    _write(task, 0)
    task.commit(0, {"in:0": 5})
    _fail_at(task, at)
    _write(task, 1)
    transaction = TaskTransaction(task, 1, {"in:0": 10})
    with pytest.raises(RuntimeError, match=f"crash at {at}"):
        transaction.commit()

    assert transaction.state is TransactionState.FAILED
    assert task.broken
    assert [c.batch_id for c in committed] == [0]  # never called for the failed commit
    reached = COMMIT_STEPS[: COMMIT_STEPS.index(at) + 1]
    assert task.store("kv").read_metadata().batch_id == (
        1 if TransactionState.STORED in reached else 0
    )
    assert len(writer.marker_calls) == (2 if TransactionState.MARKED in reached else 1)
    with pytest.raises(StatekeeperError, match="previous commit failed"):
        TaskTransaction(task, 2, {"in:0": 15}).commit()

    # Reopening restores a consistent state and lets the task commit again.
    task.commit_hooks.clear()
    task.close()
    task.open()
    assert not task.broken
    task.commit(2, {"in:0": 15})
    assert [c.batch_id for c in committed] == [0, 2]


@pytest.mark.parametrize("failing", ["outputs", "changelog"])
def test_unacknowledged_records_fail_before_any_marker(task, writer, failing):
    steps = _steps(task)
    writer.fail_flush = failing == "changelog"
    _write(task, 1)
    transaction = TaskTransaction(task, 1, {"in:0": 10})
    with pytest.raises(ProduceError):
        transaction.commit([Outputs(writer.journal, fail=failing == "outputs")])
    assert transaction.state is TransactionState.FAILED and task.broken
    assert steps == [TransactionState.FLUSHED]
    assert writer.marker_calls == []
    assert task.store("kv").read_metadata().batch_id is None


def test_after_commit_hooks_get_the_commit_boundary(task):
    seen: list[CommittedBatch] = []
    task.add_after_commit_hook(seen.append)
    for batch in range(3):
        _write(task, batch)
        task.commit(batch, {"in:0": 10 * (batch + 1)})
    assert [b.batch_id for b in seen] == [0, 1, 2]
    last = seen[-1]
    assert last.task_id == "0_0" and last.source_offsets == {"in:0": 30}
    assert last.task_dir == task.task_dir.path
    assert set(last.marker_offsets) == set(LOGGED)  # the unlogged store has no marker
    for name in LOGGED:
        assert last.marker_offsets[name] == task.store(name).read_metadata().changelog_offset
    assert last.changelog_topics == {"kv": "app-kv-changelog", "mem": "app-mem-changelog"}


def test_a_failing_after_commit_hook_is_logged_and_the_commit_stands(task, caplog):
    calls: list[int] = []

    def broken_hook(batch: CommittedBatch) -> None:
        raise OSError("snapshot disk full")

    task.add_after_commit_hook(broken_hook)
    task.add_after_commit_hook(lambda batch: calls.append(batch.batch_id))
    _write(task, 1)
    with caplog.at_level(logging.ERROR, logger="statekeeper.state"):
        task.commit(1, {"in:0": 10})
    assert "after-commit hook" in caplog.text and "snapshot disk full" in caplog.text
    assert calls == [1]
    assert task.last_batch_id == 1 and not task.broken
    task.commit(2, {"in:0": 20})
    assert calls == [1, 2]


def test_pending_transaction_commits_the_processed_batches(task):
    assert task.pending_transaction() is None
    _write(task, 1)
    task.mark_processed(1, {"in:0": 10})
    _write(task, 2)
    task.mark_processed(2, {"in:0": 20})
    transaction = task.pending_transaction()
    assert (transaction.batch_id, transaction.source_offsets) == (2, {"in:0": 20})
    transaction.commit()
    assert not task.has_uncommitted and task.uncommitted_batches == 0
    assert task.pending_transaction() is None
    assert task.last_batch_id == 2 and task.store("kv").read_metadata().batch_id == 2


# -- commit_group --------------------------------------------------------------------------


def _group(tmp_path: Path, writers: list[FakeWriter], partitions: list[int]) -> list[Any]:
    pairs = enumerate(zip(writers, partitions, strict=True))
    return [_task(tmp_path, w, f"0_{n}", p) for n, (w, p) in pairs]


def test_a_group_sharing_a_writer_waits_once_and_writes_markers_once(tmp_path, writer):
    tasks = _group(tmp_path, [writer, writer], [0, 1])
    outputs = Outputs(writer.journal)
    try:
        for task in tasks:
            _write(task, 3)
        group = [TaskTransaction(t, 3, {f"in:{n}": 7}) for n, t in enumerate(tasks)]
        commit_group(group, [outputs])
        assert [t.state for t in group] == [TransactionState.COMMITTED] * 2
        assert writer.journal.count("markers") == 1
        assert writer.journal.count("outputs flush") == 1
        assert len(writer.marker_calls[0]) == 2 * len(LOGGED)
    finally:
        for task in tasks:
            task.close()


@pytest.mark.parametrize("case", ["own writers", "one partition twice"])
def test_a_group_that_cannot_share_commits_one_by_one(tmp_path, case):
    writers = [FakeWriter(), FakeWriter()] if case == "own writers" else [FakeWriter()] * 2
    partitions = [0, 1] if case == "own writers" else [0, 0]
    tasks = _group(tmp_path, writers, partitions)
    try:
        for task in tasks:
            _write(task, 3)
        group = [TaskTransaction(t, 3, {f"in:{n}": 7}) for n, t in enumerate(tasks)]
        commit_group(group)
        assert [t.state for t in group] == [TransactionState.COMMITTED] * 2
        calls = [len(c) for w in {id(w): w for w in writers}.values() for c in w.marker_calls]
        assert calls == [len(LOGGED), len(LOGGED)]
    finally:
        for task in tasks:
            task.close()


def test_a_group_failing_before_the_store_writes_fails_every_task(tmp_path, writer):
    tasks = _group(tmp_path, [writer, writer], [0, 1])
    _fail_at(tasks[1], TransactionState.MARKED)
    hooked: list[str] = []
    for task in tasks:
        task.add_after_commit_hook(lambda b: hooked.append(b.task_id))
        _write(task, 3)
    group = [TaskTransaction(t, 3, {}) for t in tasks]
    try:
        with pytest.raises(RuntimeError):
            commit_group(group)
        assert [t.state for t in group] == [TransactionState.FAILED] * 2
        assert all(t.broken for t in tasks) and hooked == []
    finally:
        for task in tasks:
            task.close()


def test_tasks_committed_before_a_later_failure_stay_committed(tmp_path, writer):
    tasks = _group(tmp_path, [writer, writer], [0, 1])
    _fail_at(tasks[1], TransactionState.STORED)
    hooked: list[str] = []
    for task in tasks:
        task.add_after_commit_hook(lambda b: hooked.append(b.task_id))
        _write(task, 3)
    group = [TaskTransaction(t, 3, {}) for t in tasks]
    try:
        with pytest.raises(RuntimeError):
            commit_group(group)
        assert [t.state for t in group] == [TransactionState.COMMITTED, TransactionState.FAILED]
        assert [t.broken for t in tasks] == [False, True]
        assert hooked == ["0_0"]
    finally:
        for task in tasks:
            task.close()


def test_a_broken_task_stops_the_group_before_any_step(tmp_path, writer):
    tasks = _group(tmp_path, [writer, writer], [0, 1])
    tasks[1].broken = True
    group = [TaskTransaction(t, 3, {}) for t in tasks]
    try:
        with pytest.raises(StatekeeperError, match="previous commit failed"):
            commit_group(group)
        assert [t.state for t in group] == [TransactionState.OPEN] * 2
        assert not tasks[0].broken and writer.journal == []
    finally:
        for task in tasks:
            task.close()
