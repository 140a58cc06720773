"""Snapshots of a real task (embedded broker, RocksDB) to file:// and to S3 (moto server)."""

from __future__ import annotations

import random
from datetime import timedelta
from pathlib import Path

import pytest

from statekeeper.settings import load_settings
from statekeeper.snapshots import (
    SnapshotError,
    SnapshotStorage,
    list_snapshots,
    prune,
    snapshot_task,
    stage_task,
    upload_staged,
    verify_snapshot,
)
from statekeeper.snapshots.staging import KV_DUMP_FILE, read_kv_dump
from statekeeper.state.environment import StateEnvironment
from statekeeper.stores import Stores

SPECS = [
    Stores.persistent("kv").with_serdes("str", "bytes"),
    Stores.in_memory("mem").with_serdes("str", "int"),
]
KEYS = 20_000


def _env(broker, tmp_path: Path, app: str, specs=SPECS) -> StateEnvironment:
    """A state environment under ``tmp_path/state`` with ``specs``' changelogs (1 partition)."""
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        state_dir=tmp_path / "state",
        application_id=app,
    )
    env = StateEnvironment(settings)
    env.ensure_changelogs(specs, 1)
    return env


def _fill(task, rng: random.Random, keys: list[int], batch: int) -> None:
    kv, mem = task.store("kv"), task.store("mem")
    kv.put_all([(f"k{i:06d}", rng.randbytes(200)) for i in keys])
    mem.put_all([(f"k{i:06d}", i + batch) for i in keys])
    task.commit(batch, {"in:0": batch + 1})


def _by_store(results):
    return {r.manifest.store: r for r in results}


def test_incremental_snapshots_verify_and_prune(broker, tmp_path, topic_name):
    env = _env(broker, tmp_path, topic_name)
    storage = SnapshotStorage((tmp_path / "snaps").as_uri(), topic_name)
    staging = tmp_path / "staging"
    rng = random.Random(13)
    try:
        task = env.task("0_0", 0, SPECS)
        task.open()
        _fill(task, rng, list(range(KEYS)), batch=0)
        first = _by_store(snapshot_task(task, storage, staging))
        task.close()

        # Like the CLI against a stopped app: reopen the task, change 1 % of the keys.
        task = env.task("0_0", 0, SPECS)
        task.open()
        _fill(task, rng, rng.sample(range(KEYS), KEYS // 100), batch=1)
        second = _by_store(snapshot_task(task, storage, staging))
        task.close()
    finally:
        env.close()

    kv1, kv2 = first["kv"], second["kv"]
    assert kv1.bytes_uploaded == kv1.bytes_total > KEYS * 200 // 2
    ratio = kv2.bytes_uploaded / kv1.bytes_uploaded
    # RocksDB's checkpoint flushes the memtable into one new small SST; the old SST, the
    # OPTIONS file and friends are referenced, not uploaded again.
    assert ratio < 0.10, (ratio, kv2.as_dict())
    assert kv2.bytes_total > kv1.bytes_total  # the new snapshot still lists every file
    assert kv1.manifest.key_count == kv2.manifest.key_count == KEYS
    assert kv2.manifest.parent == kv1.manifest.snapshot_id
    assert kv2.manifest.batch_id == 1 and kv2.manifest.source_offsets == {"in:0": 2}
    assert kv2.manifest.marker_offset is not None
    assert kv2.manifest.marker_offset > kv1.manifest.marker_offset
    # The in-memory store is dumped whole each time (no incremental for dumps).
    mem = second["mem"].manifest
    assert mem.layout == "kv-dump" and mem.key_count == KEYS
    assert mem.changelog_topic == f"{topic_name}-mem-changelog"

    listed = list_snapshots(storage)
    assert len(listed) == 4
    assert all(verify_snapshot(storage, m).ok for m in listed)
    # A kv-dump reads back to the committed values.
    dump = next(f for f in mem.files if f.name == KV_DUMP_FILE)
    local = tmp_path / "dump"
    storage.fs.get_file(storage.shared_path(dump.sha256), str(local))
    assert len(list(read_kv_dump(local))) == KEYS

    # Corrupt a file only the newest kv snapshot has: verify names it.
    shared_first = {f.sha256 for f in kv1.manifest.files}
    only_new = next(f for f in kv2.manifest.files if f.sha256 not in shared_first)
    target = Path(storage.shared_path(only_new.sha256))
    target.write_bytes(b"x" + target.read_bytes()[1:])
    bad = verify_snapshot(storage, kv2.manifest)
    assert not bad.ok and [b["name"] for b in bad.bad] == [only_new.name]

    # A staging dir with files but no manifest (an interrupted upload) is never listed.
    leftover = Path(storage.staging_root) / "deadbeef"
    leftover.mkdir(parents=True)
    (leftover / "abc").write_bytes(b"partial")
    assert len(list_snapshots(storage)) == 4

    # keep=1: the newest kv snapshot fails verify, so the older verified one stays too.
    report = prune(storage, keep=1, grace=timedelta(0))
    assert kv1.manifest.snapshot_id in report.kept
    assert kv2.manifest.snapshot_id in report.kept
    assert report.unverified == [kv2.manifest.snapshot_id]
    assert first["mem"].manifest.snapshot_id in report.deleted_snapshots
    assert str(leftover) in report.deleted_leftovers and not leftover.exists()
    remaining = list_snapshots(storage)
    referenced = {f.sha256 for m in remaining for f in m.files}
    assert referenced <= set(storage.shared_files())
    assert all(verify_snapshot(storage, m).ok for m in remaining if m.store == "mem")


def test_snapshot_to_s3_and_bad_input(broker, tmp_path, topic_name, moto_s3):
    env = _env(broker, tmp_path, topic_name)
    try:
        with pytest.raises(SnapshotError, match="bucket 'no-such-bucket' does not exist"):
            SnapshotStorage("s3://no-such-bucket/snaps", topic_name, **moto_s3.options)
        moto_s3.make_bucket("snaps")
        storage = SnapshotStorage("s3://snaps/apps", topic_name, **moto_s3.options)
        task = env.task("0_0", 0, SPECS)
        task.open()
        _fill(task, random.Random(1), list(range(2_000)), batch=0)
        results = snapshot_task(task, storage, tmp_path / "staging")
        again = snapshot_task(task, storage, tmp_path / "staging")
        task.close()
    finally:
        env.close()
    assert {r.manifest.store for r in results} == {"kv", "mem"}
    listed = list_snapshots(storage)
    assert len(listed) == 4 and all(verify_snapshot(storage, m).ok for m in listed)
    # Nothing changed between the two snapshots: the SST files were not uploaded again.
    kv_again = next(r for r in again if r.manifest.store == "kv")
    assert kv_again.bytes_uploaded < kv_again.bytes_total / 2
    # Retention on S3: one snapshot per store stays, every file it needs too.
    report = prune(storage, keep=1, grace=timedelta(0))
    assert len(report.kept) == 2 and len(report.deleted_snapshots) == 2
    kept = list_snapshots(storage)
    assert {m.snapshot_id for m in kept} == set(report.kept)
    assert all(verify_snapshot(storage, m).ok for m in kept)
    # Another app's storage does not accept these manifests.
    other = SnapshotStorage("s3://snaps/apps", "other-app", **moto_s3.options)
    assert list_snapshots(other) == []


def test_wrong_s3_credentials_are_a_clear_error(tmp_path, moto_s3_checking_credentials):
    options = {
        "key": "wrong-key",
        "secret": "wrong-secret",
        "client_kwargs": {"endpoint_url": moto_s3_checking_credentials, "region_name": "us-east-1"},
    }
    with pytest.raises(SnapshotError) as failure:
        SnapshotStorage("s3://snaps/apps", "app", **options)
    message = str(failure.value)
    assert "cannot read bucket 'snaps'" in message
    assert "Access Key Id you provided does not exist" in message


def test_snapshot_from_an_after_commit_hook(broker, tmp_path, topic_name):
    """The hook path the running app will use: stage at the commit boundary, then upload."""
    env = _env(broker, tmp_path, topic_name)
    storage = SnapshotStorage((tmp_path / "snaps").as_uri(), topic_name)
    seen: list = []
    try:
        task = env.task("0_0", 0, SPECS)
        task.open()

        def hook(batch):
            staged = stage_task(task, tmp_path / "staging", committed=batch)
            seen.append((batch, [upload_staged(s, storage) for s in staged]))

        task.add_after_commit_hook(hook)
        _fill(task, random.Random(2), list(range(500)), batch=4)
        task.close()
    finally:
        env.close()
    [(batch, results)] = seen
    by_store = _by_store(results)
    for name in ("kv", "mem"):
        manifest = by_store[name].manifest
        assert manifest.marker_offset == batch.marker_offsets[name]
        assert manifest.batch_id == 4 and manifest.source_offsets == {"in:0": 5}
        assert manifest.key_count == 500
    assert all(r.pause_ms >= 0 for r in results)
    assert not any((tmp_path / "staging").rglob("*.sst"))  # staging cleaned after upload
