"""Restore edge cases on the real broker: corruption, locks, bad changelogs, bad topology."""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import replace

import pytest
from confluent_kafka import Producer

from statekeeper.changelog import BaseRestoreListener, changelog_topic
from statekeeper.changelog.records import MARKER_KEY
from statekeeper.errors import (
    BrokerUnavailableError,
    ChangelogCorruptError,
    ChangelogTopicError,
    TaskLockedError,
)
from statekeeper.kafka.adapter import producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.embedded import free_port
from statekeeper.settings import load_settings
from statekeeper.state.environment import StateEnvironment
from statekeeper.stores import Stores
from statekeeper.stores.rocksdb import RocksDBKeyValueStore


class RecordingListener(BaseRestoreListener):
    def __init__(self) -> None:
        self.events: list[tuple] = []

    def on_restore_start(self, partition, store, start_offset, end_offset):
        self.events.append(("start", store, start_offset))

    def on_batch_restored(self, partition, store, batch_end_offset, num_restored):
        self.events.append(("batch", store, num_restored))

    def on_restore_end(self, partition, store, total_restored):
        self.events.append(("end", store, total_restored))

    def on_restore_reason(self, partition, store, reason):
        self.events.append(("reason", store, reason))


SPECS = [Stores.persistent("kv").with_serdes("str", "int")]


def _env(broker, tmp_path, app, listener=None, **overrides):
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        state_dir=tmp_path / "state",
        application_id=app,
        **overrides,
    )
    return StateEnvironment(settings, [listener] if listener else None)


def _write_committed(env, task_id="0_0", partition=0, n=50, batch=0):
    task = env.task(task_id, partition, SPECS)
    task.open()
    kv = task.store("kv")
    for i in range(n):
        kv.put(f"k{i}", i)
    kv.delete("k0")  # a tombstone that must survive restore
    task.commit(batch, {"in:0": n})
    task.close()


def _corrupt_files(store_dir):
    for f in store_dir.iterdir():
        if f.name.startswith(("CURRENT", "MANIFEST")) or f.suffix == ".sst":
            f.write_bytes(b"\x00garbage" * 64)


def _reopen(env, specs, listener):
    """Task 0_0 opened again: the task, its restore outcomes by store, the reasons given."""
    listener.events.clear()
    task = env.task("0_0", 0, specs)
    outcomes = {o.job.store.name: o for o in task.open()}
    return task, outcomes, [e for e in listener.events if e[0] == "reason"]


def test_corrupt_store_file_is_wiped_and_fully_restored(broker, tmp_path, topic_name):
    listener = RecordingListener()
    env = _env(broker, tmp_path, topic_name, listener)
    env.ensure_changelogs(SPECS, 1)
    _write_committed(env)
    store_dir = tmp_path / "state" / topic_name / "0_0" / "rocksdb" / "kv"
    _corrupt_files(store_dir)
    listener.events.clear()
    task = env.task("0_0", 0, SPECS)
    outcomes = task.open()
    try:
        assert outcomes[0].full
        reasons = [e for e in listener.events if e[0] == "reason"]
        assert reasons and "corrupt" in reasons[0][2]
        assert ("end", "kv", 51) in listener.events  # 50 puts + 1 tombstone
        kv = task.store("kv")
        assert kv.get("k0") is None and kv.get("k49") == 49
        assert len(dict(kv.all())) == 49
        assert task.processed_offsets == {"in:0": 50}
    finally:
        task.close()
        env.close()


def test_checkpoint_beyond_changelog_end_triggers_full_restore(broker, tmp_path, topic_name, admin):
    listener = RecordingListener()
    env = _env(broker, tmp_path, topic_name, listener)
    env.ensure_changelogs(SPECS, 1)
    _write_committed(env)
    # The changelog is recreated (e.g. by an operator) while local state still points far in.
    topic = changelog_topic(topic_name, "kv")
    admin.delete_topics([topic])[topic].result(10)
    time.sleep(0.5)
    env.ensure_changelogs(SPECS, 1)
    listener.events.clear()
    task = env.task("0_0", 0, SPECS)
    outcomes = task.open()
    try:
        assert outcomes[0].full
        assert any(e[0] == "reason" and "inconsistent" in e[2] for e in listener.events)
        assert list(task.store("kv").all()) == []
    finally:
        task.close()
        env.close()


def _hold_lock(state_dir, app, bootstrap, ready, release):
    env = StateEnvironment(
        load_settings(bootstrap_servers=bootstrap, state_dir=state_dir, application_id=app)
    )
    task = env.task("0_0", 0, SPECS)
    task.open()
    ready.set()
    release.wait(30)
    task.close()


def test_second_process_gets_lock_error_naming_holder(broker, tmp_path, topic_name):
    env = _env(broker, tmp_path, topic_name, lock_timeout_s=0.5)
    env.ensure_changelogs(SPECS, 1)
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(
        target=_hold_lock,
        args=(tmp_path / "state", topic_name, broker.bootstrap_servers, ready, release),
    )
    holder.start()
    try:
        assert ready.wait(60)
        with pytest.raises(TaskLockedError, match=f"PID {holder.pid}"):
            env.task("0_0", 0, SPECS).open()
    finally:
        release.set()
        holder.join(30)
        env.close()
    # Once the holder is gone the lock is free again.
    task = env.task("0_0", 0, SPECS)
    task.open()
    task.close()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (MARKER_KEY, b"{not json", "undecodable commit marker.*offset 0"),
        (None, b"x", "null key"),
    ],
    ids=["undecodable-marker", "null-key"],
)
def test_corrupt_changelog_record_is_a_clear_error(
    broker, tmp_path, topic_name, key, value, message
):
    env = _env(broker, tmp_path, topic_name)
    env.ensure_changelogs(SPECS, 1)
    producer = Producer(producer_config(broker.bootstrap_servers))
    producer.produce(changelog_topic(topic_name, "kv"), value, key, 0)
    producer.flush(10)
    with pytest.raises(ChangelogCorruptError, match=message):
        env.task("0_0", 0, SPECS).open()
    env.close()


def test_changelog_with_fewer_partitions_than_source_is_rejected(
    broker, admin, tmp_path, topic_name
):
    ensure_topic(admin, changelog_topic(topic_name, "kv"), 2, {"cleanup.policy": "compact"})
    env = _env(broker, tmp_path, topic_name)
    with pytest.raises(ChangelogTopicError, match="has 2 partitions but the source has 4"):
        env.ensure_changelogs(SPECS, 4)
    env.close()


def test_missing_changelog_topic_is_reported(broker, admin, tmp_path, topic_name):
    from statekeeper.changelog.topics import check_changelog_topics

    with pytest.raises(ChangelogTopicError, match="does not exist"):
        check_changelog_topics(admin, topic_name, SPECS, 0)


def test_unreachable_broker_fails_fast_with_clear_error(tmp_path):
    settings = load_settings(
        bootstrap_servers=f"127.0.0.1:{free_port()}", state_dir=tmp_path, broker_timeout_s=1.0
    )
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError):
        StateEnvironment(settings)
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("restore_threads", [1, 2])
def test_a_contradicted_checkpoint_restores_fully_beside_a_partial_restore(
    broker, tmp_path, topic_name, restore_threads
):
    """Two stores of a task restore together (one consumer per group of partitions): one
    store's checkpoint points at a data record, not a marker, so that store alone restores
    fully; the other continues from its checkpoint. Both end with the committed state."""
    specs = [Stores.persistent(name).with_serdes("str", "int") for name in ("kv", "kv2")]
    listener = RecordingListener()
    env = _env(broker, tmp_path, topic_name, listener, restore_threads=restore_threads)
    env.ensure_changelogs(specs, 1)
    try:
        for batch in range(3):
            task = env.task("0_0", 0, specs)
            task.open()
            for name in ("kv", "kv2"):
                for i in range(40):
                    task.store(name).put(f"k{i}", batch * 100 + i)
            task.commit(batch, {"in:0": 40 * (batch + 1)})
            task.close()
        kv_dir = tmp_path / "state" / topic_name / "0_0" / "rocksdb" / "kv"
        store = RocksDBKeyValueStore("kv", kv_dir)
        meta = store.read_metadata()
        # Offset 5 of kv's changelog holds a data record (the first batch's puts).
        store.restore_batch([], replace(meta, changelog_offset=5))
        store.close()
        task, outcomes, reasons = _reopen(env, specs, listener)
        try:
            assert outcomes["kv"].full and not outcomes["kv2"].full
            assert [(e[1], "is not a commit marker" in e[2]) for e in reasons] == [("kv", True)]
            assert outcomes["kv2"].restored_records == 0  # nothing after its checkpoint
            for name in ("kv", "kv2"):
                assert dict(task.store(name).all()) == {f"k{i}": 200 + i for i in range(40)}
            assert task.processed_offsets == {"in:0": 120}
        finally:
            task.close()
    finally:
        env.close()


def test_a_corrupt_store_beside_a_sound_one_reports_its_reason_and_restores_fully(
    broker, tmp_path, topic_name
):
    """A full restore decided at open (corrupt files, wiped) in a task whose other store
    restores from its checkpoint: both are read together, and the reason still reaches the
    listeners."""
    specs = [Stores.persistent(name).with_serdes("str", "int") for name in ("kv", "kv2")]
    listener = RecordingListener()
    env = _env(broker, tmp_path, topic_name, listener)
    env.ensure_changelogs(specs, 1)
    try:
        task = env.task("0_0", 0, specs)
        task.open()
        for name in ("kv", "kv2"):
            for i in range(30):
                task.store(name).put(f"k{i}", i)
        task.commit(0, {"in:0": 30})
        task.close()
        store_dir = tmp_path / "state" / topic_name / "0_0" / "rocksdb" / "kv"
        _corrupt_files(store_dir)
        task, outcomes, reasons = _reopen(env, specs, listener)
        try:
            assert outcomes["kv"].full and not outcomes["kv2"].full
            assert [(e[1], "corrupt" in e[2]) for e in reasons] == [("kv", True)], reasons
            for name in ("kv", "kv2"):
                assert dict(task.store(name).all()) == {f"k{i}": i for i in range(30)}
        finally:
            task.close()
    finally:
        env.close()
