"""Two ways to open a task: installing a missing store from a snapshot first (invariant 4,
the running app's path), and read-only (a sandbox copy that never writes to a changelog)."""

from __future__ import annotations

import random
import shutil

import pytest

from statekeeper.changelog.records import changelog_topic
from statekeeper.errors import StatekeeperError
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotStorage, snapshot_task
from statekeeper.snapshots.install import installer_for
from statekeeper.state.directory import TaskDirectory
from statekeeper.state.environment import StateEnvironment

from .test_snapshots import SPECS, _env, _fill

KEYS = 3_000
TAIL_KEYS = 150


def _state(task) -> dict[str, dict]:
    return {name: dict(task.store(name).all()) for name in ("kv", "mem")}


def test_missing_store_is_installed_from_the_newest_snapshot(broker, tmp_path, topic_name):
    env = _env(broker, tmp_path, topic_name)
    storage = SnapshotStorage((tmp_path / "snaps").as_uri(), topic_name)
    rng = random.Random(3)
    try:
        with env.task("0_0", 0, SPECS) as task:
            _fill(task, rng, list(range(KEYS)), batch=0)
            [snap] = [
                r for r in snapshot_task(task, storage, tmp_path / "st") if r.manifest.store == "kv"
            ]
            _fill(task, rng, rng.sample(range(KEYS), TAIL_KEYS), batch=1)
            live = _state(task)
        shutil.rmtree(TaskDirectory(tmp_path / "state", topic_name, "0_0").path)

        installer = installer_for(env.settings, storage, "0_0", 0)
        task = env.task("0_0", 0, SPECS, installer=installer)
        outcomes = {o.job.store.name: o for o in task.open()}
        try:
            assert task.installs["kv"]["source"] == "snapshot"
            assert task.installs["kv"]["snapshot_id"] == snap.manifest.snapshot_id
            assert "mem" not in task.installs  # in-memory: always the whole changelog
            assert outcomes["kv"].restored_records == TAIL_KEYS
            assert not outcomes["kv"].full
            assert _state(task) == live and task.last_batch_id == 1
        finally:
            task.close()

        # A local copy present: the installer is not asked.
        task = env.task("0_0", 0, SPECS, installer=installer)
        with task:
            assert task.installs == {}
    finally:
        env.close()


def test_read_only_open_restores_to_the_marker_and_writes_nothing(broker, tmp_path, topic_name):
    env = _env(broker, tmp_path, topic_name)
    rng = random.Random(4)
    topics = [(changelog_topic(topic_name, s.name), 0) for s in SPECS]
    conf = consumer_config(broker.bootstrap_servers)
    try:
        with env.task("0_0", 0, SPECS) as task:
            _fill(task, rng, list(range(KEYS)), batch=0)
            committed = _state(task)
        # A crashed attempt's records: logged, never marked.
        for key in range(50):
            env.writer.send(topics[0][0], 0, f"k{key:06d}".encode(), b"uncommitted")
        env.writer.flush(10)
        ends = log_end_offsets(conf, topics)

        sandbox = load_settings(
            bootstrap_servers=broker.bootstrap_servers,
            state_dir=tmp_path / "sandbox",
            application_id=topic_name,
        )
        reader = StateEnvironment(sandbox, read_only=True)
        try:
            assert reader.writer is None
            with reader.task("0_0", 0, SPECS) as copy:
                assert _state(copy) == committed
                copy.store("kv").put("k000001", b"x")
                with pytest.raises(StatekeeperError, match="read-only"):
                    copy.commit(1, {"in:0": 2})
        finally:
            reader.close()
        assert log_end_offsets(conf, topics) == ends  # no revert, no marker

        # Read-only over the owner's own directory: its checkpoint file is left as it was.
        checkpoint = TaskDirectory(tmp_path / "state", topic_name, "0_0").checkpoint_file
        before = checkpoint.stat().st_mtime_ns, checkpoint.read_bytes()
        reader = StateEnvironment(env.settings, read_only=True)
        try:
            with reader.task("0_0", 0, SPECS) as copy:
                assert _state(copy) == committed
        finally:
            reader.close()
        assert (checkpoint.stat().st_mtime_ns, checkpoint.read_bytes()) == before
    finally:
        env.close()
