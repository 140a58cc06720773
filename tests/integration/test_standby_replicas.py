"""Standby replicas over the real broker and RocksDB: an active task commits in state dir A,
a standby keeps a copy in state dir B at the last commit marker, and the task then opens as
active in B replaying only what the standby had not applied yet."""

from __future__ import annotations

import functools
import json
import random
import sys
import threading
import time
from pathlib import Path

import pytest

from spark_apps.word_count_sqlite.sqlite_store import SQLiteStoreSupplier
from statekeeper.changelog.records import changelog_topic
from statekeeper.cluster.executor import ExecutorIdentity
from statekeeper.kafka.adapter import consumer_config
from statekeeper.placement.assignment import Assignment, TaskPlacement
from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotStorage, snapshot_task
from statekeeper.snapshots.install import installer_for
from statekeeper.standby.executor_standbys import StandbyReplicas
from statekeeper.standby.listener import (
    BaseStandbyUpdateListener,
    RecordingStandbyListener,
    SuspendReason,
    replay_event,
)
from statekeeper.standby.standby_task import StandbyTask, StandbyUnavailableError, UpdateResult
from statekeeper.state.directory import TaskDirectory, TaskLock
from statekeeper.state.environment import StateEnvironment
from statekeeper.stores import Stores

SPECS = [
    Stores.persistent("kv").with_serdes("str", "bytes"),
    Stores.in_memory("mem").with_serdes("str", "int"),
]
TASK = "0_0"
#: The same stores with "kv" in a custom engine (docs/custom-stores.md): standbys, their
#: promotion and their snapshot installs go through the supplier like RocksDB's.
CUSTOM_SPECS = [
    Stores.custom("kv", SQLiteStoreSupplier()).with_serdes("str", "bytes"),
    SPECS[1],
]


@pytest.fixture(params=["rocksdb", "sqlite"])
def engine(request, monkeypatch) -> str:
    """Runs a test once per engine of store "kv" (the helpers read ``SPECS`` when called)."""
    if request.param == "sqlite":
        monkeypatch.setattr(sys.modules[__name__], "SPECS", CUSTOM_SPECS)
    return request.param


def _settings(broker, state_dir: Path, app: str):
    return load_settings(
        bootstrap_servers=broker.bootstrap_servers, state_dir=state_dir, application_id=app
    )


def _active_env(broker, tmp_path: Path, app: str) -> StateEnvironment:
    env = StateEnvironment(_settings(broker, tmp_path / "a", app))
    env.ensure_changelogs(SPECS, 1)
    return env


def _commit(task, rng: random.Random, keys, batch: int, deletes=()) -> None:
    kv, mem = task.store("kv"), task.store("mem")
    kv.put_all([(f"k{i:06d}", rng.randbytes(64)) for i in keys])
    mem.put_all([(f"k{i:06d}", i + batch) for i in keys])
    for i in deletes:
        kv.delete(f"k{i:06d}")
    task.commit(batch, {"in:0": batch + 1})


def _kv(store) -> dict:
    return dict(store.all())


def _standby(broker, tmp_path: Path, app: str, listener, **kw) -> StandbyTask:
    return StandbyTask(
        application_id=app,
        task_id=TASK,
        partition=0,
        specs=SPECS,
        state_dir=tmp_path / "b",
        consumer_config=consumer_config(broker.bootstrap_servers),
        listener=listener,
        timeout_s=10,
        **kw,
    )


def _wait_for(predicate, what: str, timeout_s: float = 15):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _update_until(standby: StandbyTask, done, what: str):
    """Update steps until ``done()``: after its first step a standby takes what its
    consumer has fetched so far, so a commit shows up within a step or two."""
    return _wait_for(lambda: standby.update() is UpdateResult.UPDATED and done(), what)


class _LagWatcher(BaseStandbyUpdateListener):
    """Reads the standby's lag as each batch is loaded."""

    def __init__(self) -> None:
        self.task: StandbyTask | None = None
        self.lags: list[int | None] = []

    def on_batch_loaded(self, topic_partition, store_name, *args) -> None:  # type: ignore[no-untyped-def]
        assert self.task is not None
        self.lags.append(self.task.progress[store_name].lag)


def test_standby_follows_commits_skips_the_uncommitted_tail_and_yields_its_lock(
    broker, tmp_path, topic_name
):
    env = _active_env(broker, tmp_path, topic_name)
    rng = random.Random(7)
    recorder = RecordingStandbyListener()
    watcher = _LagWatcher()

    class Both(BaseStandbyUpdateListener):
        def on_update_start(self, *a):  # type: ignore[no-untyped-def]
            recorder.on_update_start(*a)

        def on_batch_loaded(self, *a):  # type: ignore[no-untyped-def]
            recorder.on_batch_loaded(*a)
            watcher.on_batch_loaded(*a)

        def on_update_suspended(self, *a):  # type: ignore[no-untyped-def]
            recorder.on_update_suspended(*a)

    # Small write batches: the catch-up below loads several, so lag is seen shrinking.
    standby = _standby(broker, tmp_path, topic_name, Both(), batch_records=1_000)
    watcher.task = standby
    topic = changelog_topic(topic_name, "kv")
    try:
        task = env.task(TASK, 0, SPECS)
        task.open()
        for batch in range(4):
            _commit(task, rng, range(batch * 1_500, (batch + 1) * 1_500), batch)
        _commit(task, rng, range(0, 300), 4, deletes=range(6_000 - 200, 6_000))
        assert standby.progress["kv"].lag is None  # nothing measured yet

        assert standby.update() is UpdateResult.UPDATED
        copy = standby.stores()["kv"]
        assert _kv(copy) == _kv(task.store("kv"))  # tombstones applied too
        assert "k005999" not in _kv(copy) and len(_kv(copy)) == 6_000 - 200
        marker = task.store("kv").read_metadata().changelog_offset
        assert standby.progress["kv"].applied_offset == marker
        assert copy.read_metadata().batch_id == 4
        assert copy.read_metadata().source_offsets == {"in:0": 5}
        assert watcher.lags[0] > 0 and watcher.lags[-1] == 0 and len(watcher.lags) >= 3
        assert standby.status()["lag"] == {"kv": 0}
        assert "mem" not in standby.stores()  # in-memory stores are never kept

        # A crashed attempt's records, logged but never marked: not applied.
        task.close()
        env.writer.send(topic, 0, b"k000001", b"uncommitted")
        for i in range(49):
            env.writer.send(topic, 0, f"new{i}".encode(), b"uncommitted")
        env.writer.flush(10)
        committed = _kv(copy)
        _update_until(standby, lambda: standby.progress["kv"].tail_keys == 50, "the tail read")
        assert _kv(copy) == committed
        assert standby.progress["kv"].applied_offset == marker
        assert standby.status()["lag"] == {"kv": 0}

        # The owner reopens (reverting the tail) and commits again; the standby follows.
        # While the standby holds the lock, the owner's open asks for it and gets it.
        task = env.task(TASK, 0, SPECS)
        task.open()  # dir A: no contention with the standby in dir B
        _commit(task, rng, range(100, 400), 5, deletes=range(10))  # tombstones, read on
        marker = task.store("kv").read_metadata().changelog_offset
        _update_until(
            standby, lambda: standby.progress["kv"].applied_offset == marker, "the next commit"
        )
        assert _kv(copy) == _kv(task.store("kv")) and "k000003" not in _kv(copy)
        assert standby.progress["kv"].tail_keys == 0  # the revert and its marker closed it
        checkpoint = TaskDirectory(tmp_path / "b", topic_name, TASK).checkpoint_file
        assert f"{topic} 0 {standby.progress['kv'].applied_offset}" in checkpoint.read_text()

        # A release request (another opener of dir B) is answered at the next poll.
        assert standby.held
        other = TaskLock(TaskDirectory(tmp_path / "b", topic_name, TASK), timeout_s=5)
        taken = threading.Event()
        waiter = threading.Thread(target=lambda: (other.acquire(), taken.set()))
        waiter.start()
        deadline = time.monotonic() + 5
        while not standby.release_if_requested():
            assert time.monotonic() < deadline, "no release request seen"
            time.sleep(0.01)
        assert taken.wait(2)
        waiter.join()
        assert not standby.held and standby.releases == 1
        print(f"standby release: {standby.status()['last_release_ms']} ms after the request")
        assert standby.update() is UpdateResult.BUSY  # held elsewhere: skipped, not stolen
        assert not other.release_requested()
        other.release()
        assert standby.update() is UpdateResult.UPDATED

        standby.suspend(SuspendReason.MIGRATED)
        assert not standby.held
        task.close()
    finally:
        standby.release()
        env.close()

    kinds = [(e["event"], e.get("reason")) for e in recorder.events() if e["store"] == "kv"]
    assert kinds[0] == ("update_start", None)
    assert kinds[-1] == ("update_suspended", "migrated")
    assert {k for k, _ in kinds[1:-1]} == {"batch_loaded"}
    loaded = [e for e in recorder.events() if e["event"] == "batch_loaded"]
    assert all(e["current_end_offset"] > e["batch_end_offset"] for e in loaded)
    assert [e["seq"] for e in recorder.events()] == sorted(e["seq"] for e in recorder.events())


class _Topology:
    """What the component asks of the app's topology."""

    def store_specs(self, subtopology_id: int):
        assert subtopology_id == 0
        return SPECS


def test_promotion_opens_on_the_standby_copy_and_replays_only_the_tail(
    broker, tmp_path, topic_name, engine
):
    env = _active_env(broker, tmp_path, topic_name)
    rng = random.Random(11)
    settings_b = _settings(broker, tmp_path / "b", topic_name)
    replicas = StandbyReplicas(
        settings_b, tmp_path / "b", ExecutorIdentity("2", "localhost", 0), _Topology()
    )
    env_b = None
    try:
        task = env.task(TASK, 0, SPECS)
        task.open()
        total = 0
        for batch in range(4):  # more than CLOSE_AFTER_RECORDS: the copy is closed, reopened
            _commit(task, rng, range(batch * 6_000, (batch + 1) * 6_000), batch)
            total += 6_000
        replicas.reconcile(
            Assignment(topic_name, 1, {TASK: TaskPlacement("1", ("2",)), "0_1": TaskPlacement("2")})
        )

        def caught_up():
            marker = task.store("kv").read_metadata().changelog_offset
            doc = replicas.report().get(TASK, {})
            done = doc.get("applied_offsets", {}).get("kv") == marker and doc.get("updated")
            return done and doc.get("last_result") == "updated" and doc

        doc = _wait_for(caught_up, "the standby to catch up")
        assert doc["state"] == "running" and doc["lag"] == {"kv": 0} and doc["updated"]
        assert "0_1" not in replicas.report()  # active here, never a standby
        copy_dir = TaskDirectory(tmp_path / "b", topic_name, TASK).store_path("kv")
        if engine == "rocksdb":
            assert list(copy_dir.glob("*.sst"))  # the catch-up's memtable was written out
        else:
            assert (copy_dir / "store.sqlite3").is_file()
        assert json.loads(json.dumps(replicas.report()))[TASK]["lag"] == {"kv": 0}
        value, status = replicas.read(TASK, "kv", lambda kv: kv.get("k000001"))
        assert value == task.store("kv").get("k000001") and status["lag"] == {"kv": 0}
        with pytest.raises(StandbyUnavailableError, match="no standby of task 0_1"):
            replicas.read("0_1", "kv", len)

        # Later commits are followed continuously.
        _commit(task, rng, range(0, 500), 4)
        doc = _wait_for(caught_up, "the standby to follow a commit")
        print(f"standby step on an idle changelog: {doc['last_step_ms']} ms")

        # The active executor dies after one more commit; the task opens on the standby's
        # executor: the open asks for the standby's lock and replays at most that commit.
        _commit(task, rng, range(30_000, 30_400), 5)
        expected = _kv(task.store("kv"))
        task.close()
        env_b = StateEnvironment(settings_b)
        promoted = env_b.task(TASK, 0, SPECS)
        started = time.perf_counter()
        outcomes = {o.job.store.name: o for o in promoted.open()}
        open_s = time.perf_counter() - started
        try:
            kv = outcomes["kv"]
            print(
                f"promotion: open {open_s * 1e3:.0f} ms, kv replayed {kv.restored_records} of "
                f"{total + 900} records, mem (in-memory) {outcomes['mem'].restored_records}"
            )
            assert not kv.full and kv.restored_records <= 400
            assert _kv(promoted.store("kv")) == expected
            assert promoted.last_batch_id == 5
            assert open_s < 5.0  # ~0.1 s measured; bounded by the lock wait, not lock_timeout_s

            replicas.reconcile(Assignment(topic_name, 2, {TASK: TaskPlacement("2", ("1",))}))
            doc = _wait_for(
                lambda: replicas.report()[TASK]["state"] == "suspended" and replicas.report()[TASK],
                "the standby to be suspended",
            )
            assert doc["reason"] == "promoted"
            print(f"hand-off: lock freed {doc['last_release_ms']} ms after the request")
            assert doc["releases"] >= 1 and doc["last_release_ms"] < 1_000
        finally:
            promoted.close()
    finally:
        replicas.close()
        if env_b is not None:
            env_b.close()
        env.close()

    events = [e for e in replicas.report()["events"] if e["store"] == "kv"]
    assert events[0]["event"] == "update_start" and events[0]["starting_offset"] == 0
    assert events[-1]["event"] == "update_suspended" and events[-1]["reason"] == "promoted"
    assert all(e["event"] == "batch_loaded" for e in events[1:-1]) and len(events) >= 3

    # The driver side replays recorded events to the app's listeners.
    seen: list[tuple] = []

    class Collect(BaseStandbyUpdateListener):
        def on_update_suspended(self, tp, store, store_offset, end, reason) -> None:  # type: ignore[no-untyped-def]
            seen.append((tp, store, reason))

    for event in events:
        replay_event(event, Collect())
    assert seen == [((changelog_topic(topic_name, "kv"), 0), "kv", SuspendReason.PROMOTED)]


def test_migrated_and_misconfigured_standbys(broker, tmp_path, topic_name):
    env = _active_env(broker, tmp_path, topic_name)
    settings_b = _settings(broker, tmp_path / "b", topic_name)
    me = ExecutorIdentity("2", "localhost", 0)
    replicas = StandbyReplicas(settings_b, tmp_path / "b", me, _Topology(), interval_s=0.1)
    blind = StandbyReplicas(settings_b, tmp_path / "c", me)  # no topology
    try:
        with env.task(TASK, 0, SPECS) as task:
            _commit(task, random.Random(1), range(200), 0)
        placed = Assignment(topic_name, 1, {TASK: TaskPlacement("1", ("2",))})
        replicas.reconcile(placed)
        blind.reconcile(placed)
        _wait_for(lambda: replicas.report().get(TASK, {}).get("lag") == {"kv": 0}, "catch-up")
        doc = _wait_for(lambda: blind.report().get(TASK), "the failure")
        assert doc["state"] == "failed" and "without a topology" in doc["error"]

        replicas.reconcile(Assignment(topic_name, 2, {TASK: TaskPlacement("1", ("3",))}))
        doc = _wait_for(
            lambda: replicas.report()[TASK]["state"] == "suspended" and replicas.report()[TASK],
            "migration",
        )
        assert doc["reason"] == "migrated" and doc["applied_offsets"]["kv"] is not None
        lock = TaskLock(TaskDirectory(tmp_path / "b", topic_name, TASK), timeout_s=0)
        assert not lock.held_elsewhere()
        with pytest.raises(Exception, match="assignment of app"):
            replicas.reconcile(Assignment("other-app", 3))
    finally:
        replicas.close()
        blind.close()
        env.close()
    drained = replicas.drain_events()
    assert [e["event"] for e in drained][-1] == "update_suspended"
    assert replicas.drain_events() == []


WINDOWED = [
    *SPECS,
    Stores.window("win", size_ms=1_000, retention_ms=3_600_000).with_serdes("str", "int"),
]


def test_a_catch_up_interrupted_by_a_release_request_leaves_a_marker_to_continue_from(
    broker, tmp_path, topic_name
):
    env = StateEnvironment(_settings(broker, tmp_path / "a", topic_name))
    env.ensure_changelogs(WINDOWED, 1)
    rng = random.Random(5)
    lock = TaskLock(TaskDirectory(tmp_path / "b", topic_name, TASK), timeout_s=10)
    waiter = threading.Thread(target=lock.acquire)

    class AskAtThirdBatch(BaseStandbyUpdateListener):
        loaded = 0

        def on_batch_loaded(self, *args) -> None:  # type: ignore[no-untyped-def]
            AskAtThirdBatch.loaded += 1
            if AskAtThirdBatch.loaded == 3:
                waiter.start()  # its acquire leaves a release request, then waits
                _wait_for(lock.release_requested, "the release request", 5)

    standby = StandbyTask(
        application_id=topic_name,
        task_id=TASK,
        partition=0,
        specs=WINDOWED,
        state_dir=tmp_path / "b",
        consumer_config=consumer_config(broker.bootstrap_servers),
        listener=AskAtThirdBatch(),
        batch_records=500,
        interrupt=lambda: AskAtThirdBatch.loaded == 1,  # the first step ends after a batch
    )
    try:
        with env.task(TASK, 0, WINDOWED) as task:
            for batch in range(10):
                keys = range(batch * 500, (batch + 1) * 500)
                _commit(task, rng, keys, batch)  # kv + mem
                win = task.store("win")
                for i in keys:
                    win.put(f"w{i % 50}", i, (i % 20) * 1_000)
                task.commit(batch, {"in:0": batch + 1})
            expected = {n: sorted(task.store(n).all()) for n in ("kv", "win")}
            final = task.store("kv").read_metadata().changelog_offset

        assert standby.update() is UpdateResult.INTERRUPTED
        assert standby.held and standby.progress["kv"].applied_offset is not None
        first = standby.progress["kv"].applied_offset
        assert standby.update() is UpdateResult.RELEASED
        waiter.join(5)
        assert lock.held and not standby.held
        applied = standby.progress["kv"].applied_offset
        assert first < applied < final  # stopped at a marker midway
        assert standby.status()["last_release_ms"] < 1_000
        lock.release()

        # The copy continues from that marker: first as the standby again...
        assert standby.update() is UpdateResult.UPDATED
        assert standby.progress["kv"].applied_offset == final
        assert {n: sorted(s.all()) for n, s in standby.stores().items()} == expected
        standby.suspend(SuspendReason.PROMOTED)

        # ...and as the active task on this executor, which has nothing left to replay.
        env_b = StateEnvironment(_settings(broker, tmp_path / "b", topic_name))
        try:
            with env_b.task(TASK, 0, WINDOWED) as promoted:
                restored = {o.job.store.name: o.restored_records for o in promoted.restore_outcomes}
                assert restored["kv"] == 0 and restored["win"] == 0
                assert {n: sorted(promoted.store(n).all()) for n in ("kv", "win")} == expected
        finally:
            env_b.close()
    finally:
        standby.release()
        env.close()


def test_a_new_standby_installs_the_newest_snapshot_and_replays_only_the_tail(
    broker, tmp_path, topic_name, engine
):
    env = _active_env(broker, tmp_path, topic_name)
    storage = SnapshotStorage((tmp_path / "snaps").as_uri(), topic_name)
    settings_b = _settings(broker, tmp_path / "b", topic_name)
    rng = random.Random(9)
    replicas = StandbyReplicas(
        settings_b,
        tmp_path / "b",
        ExecutorIdentity("2", "localhost", 0),
        _Topology(),
        installer_for=functools.partial(installer_for, settings_b, storage),
    )
    try:
        with env.task(TASK, 0, SPECS) as task:
            _commit(task, rng, range(3_000), 0)
            snapshot_task(task, storage, tmp_path / "staging", stores=["kv"])
            _commit(task, rng, range(100), 1)
            expected = _kv(task.store("kv"))
            marker = task.store("kv").read_metadata().changelog_offset
        replicas.reconcile(Assignment(topic_name, 1, {TASK: TaskPlacement("1", ("2",))}))
        _wait_for(
            lambda: replicas.report().get(TASK, {}).get("applied_offsets") == {"kv": marker},
            "the standby to catch up",
        )
        assert replicas.read(TASK, "kv", _kv)[0] == expected
        events = [e for e in replicas.report()["events"] if e["store"] == "kv"]
        assert events[0]["event"] == "update_start" and events[0]["starting_offset"] > 3_000
        assert sum(e["batch_size"] for e in events if e["event"] == "batch_loaded") == 100
    finally:
        replicas.close()
        env.close()


def test_a_standby_never_asks_an_active_owner_for_the_lock(broker, tmp_path, topic_name):
    """A task still open here as active (parked between batches, say) keeps its lock: the
    standby skips its steps without leaving a release request, and takes over once the
    owner closes."""
    settings_b = _settings(broker, tmp_path / "b", topic_name)
    env = StateEnvironment(settings_b)
    env.ensure_changelogs(SPECS, 1)
    replicas = StandbyReplicas(
        settings_b, tmp_path / "b", ExecutorIdentity("2", "localhost", 0), _Topology()
    )
    try:
        task = env.task(TASK, 0, SPECS)
        task.open()
        _commit(task, random.Random(3), range(500), 0)
        replicas.reconcile(Assignment(topic_name, 1, {TASK: TaskPlacement("1", ("2",))}))
        _wait_for(lambda: replicas.report().get(TASK, {}).get("last_result") == "busy", "a step")
        time.sleep(0.6)  # a few more rounds
        assert not task.release_requested()
        assert replicas.report()[TASK]["applied_offsets"] == {"kv": None}
        marker = task.store("kv").read_metadata().changelog_offset
        task.close()
        _wait_for(
            lambda: replicas.report()[TASK]["applied_offsets"] == {"kv": marker}, "the take-over"
        )
    finally:
        replicas.close()
        env.close()
