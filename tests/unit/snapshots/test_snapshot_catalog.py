"""Snapshot manifest, kv-dump and catalog logic on file:// storage in tmp dirs (no broker)."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from statekeeper.snapshots import (
    FORMAT_VERSION,
    Manifest,
    SnapshotError,
    SnapshotStorage,
    list_snapshots,
    prune,
    verify_snapshot,
)
from statekeeper.snapshots.manifest import SnapshotFile, new_snapshot_id
from statekeeper.snapshots.staging import read_kv_dump, stage_store, write_kv_dump
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.memory import InMemoryKeyValueStore
from statekeeper.stores.rocksdb import RocksDBKeyValueStore

# Shared files' ages come from their real mtimes, so "now" must follow the real clock: a
# fixed date failed once the clock passed it (files written "after now" are never pruned),
# and so did one taken at import in a long run. Set per test, a little ahead of the files.
NOW = datetime.now(UTC)


@pytest.fixture(autouse=True)
def _now_follows_the_clock() -> None:
    global NOW
    NOW = datetime.now(UTC).replace(microsecond=0) + timedelta(minutes=5)


APP = "app"


def _storage(tmp_path: Path) -> SnapshotStorage:
    return SnapshotStorage((tmp_path / "snaps").as_uri(), APP)


def _put(storage: SnapshotStorage, tmp_path: Path, content: bytes) -> SnapshotFile:
    sha = hashlib.sha256(content).hexdigest()
    local = tmp_path / f"upload-{sha[:8]}"
    local.write_bytes(content)
    storage.upload_shared(local, sha)
    return SnapshotFile(f"f-{sha[:6]}", sha, len(content))


def _manifest(
    storage, tmp_path, task="0_0", store="kv", age_h=0.0, contents=(b"a",), parent=None
) -> Manifest:
    created = NOW - timedelta(hours=age_h)
    files = [_put(storage, tmp_path, c) for c in contents]
    manifest = Manifest(
        snapshot_id=new_snapshot_id(task, store, 1, created),
        app=APP,
        task=task,
        store=store,
        store_kind="rocksdb",
        layout="rocksdb-checkpoint",
        key_serde="str",
        value_serde="int",
        changelog_topic=f"{APP}-{store}-changelog",
        changelog_partition=0,
        marker_offset=10,
        source_offsets={"in:0": 5},
        batch_id=1,
        key_count=3,
        files=files,
        created_at=created.isoformat(),
        statekeeper_version="0.1.0",
        parent=parent,
    )
    storage.write_manifest(manifest)
    return manifest


def test_manifest_round_trip_and_newer_format_is_refused() -> None:
    m = Manifest(
        "id",
        APP,
        "0_0",
        "kv",
        "memory",
        "kv-dump",
        "str",
        "int",
        None,
        0,
        None,
        {},
        None,
        0,
        [SnapshotFile("data.kvdump", "ab" * 32, 7)],
        NOW.isoformat(),
        "0.1.0",
    )
    assert Manifest.from_json(m.to_json()) == m
    newer = json.loads(m.to_json()) | {"format_version": FORMAT_VERSION + 1}
    with pytest.raises(SnapshotError, match="format version 2, newer"):
        Manifest.from_json(json.dumps(newer), where="x.json")
    with pytest.raises(SnapshotError, match="not valid JSON"):
        Manifest.from_json("{", where="x.json")


def test_kv_dump_round_trip(tmp_path) -> None:
    entries = [(b"", b"empty key"), (b"k1", b""), (b"k2", bytes(range(256)))]
    assert write_kv_dump(tmp_path / "d", entries) == 3
    assert list(read_kv_dump(tmp_path / "d")) == entries
    (tmp_path / "bad").write_bytes(b"nope")
    with pytest.raises(SnapshotError, match="not a statekeeper kv-dump"):
        list(read_kv_dump(tmp_path / "bad"))


def test_stage_refuses_uncommitted_writes_and_counts_keys(tmp_path) -> None:
    store = RocksDBKeyValueStore("kv", tmp_path / "db")
    store.put(b"a", b"1")
    with pytest.raises(SnapshotError, match="uncommitted writes"):
        stage_store(store, tmp_path / "stage1")
    store.commit(StoreMetadata(7, 1, {"in:0": 2}))
    staged = stage_store(store, tmp_path / "stage2")
    assert staged.key_count == 1 and staged.metadata.changelog_offset == 7
    assert any(f.name.endswith(".sst") for f in staged.files)
    store.close()
    memory = InMemoryKeyValueStore("mem")
    memory.put_all([(b"x", b"1"), (b"y", b"2")])
    staged = stage_store(memory, tmp_path / "stage3")
    assert staged.layout == "kv-dump" and staged.key_count == 2


def test_list_only_complete_snapshots_of_this_app(tmp_path) -> None:
    storage = _storage(tmp_path)
    m = _manifest(storage, tmp_path)
    # A half-written manifest and a staging upload are never listed.
    path = Path(storage.manifest_path("0_0", "kv", "zzz")).with_suffix(".json.partial-1")
    path.write_text("{")
    (Path(storage.staging_root) / "u1").mkdir(parents=True)
    assert [x.snapshot_id for x in list_snapshots(storage)] == [m.snapshot_id]
    # A manifest of another app in this app's folder is an error naming both.
    foreign = json.loads(m.to_json()) | {"app": "other", "snapshot_id": "foreign"}
    Path(storage.manifest_path("0_0", "kv", "foreign")).write_text(json.dumps(foreign))
    with pytest.raises(SnapshotError, match="belongs to app 'other', not 'app'"):
        list_snapshots(storage)
    with pytest.raises(SnapshotError, match="no snapshots of app 'ghost'"):
        SnapshotStorage((tmp_path / "snaps").as_uri(), "ghost", create=False)


def test_shared_files_are_uploaded_once(tmp_path) -> None:
    storage = _storage(tmp_path)
    local = tmp_path / "f"
    local.write_bytes(b"same")
    sha = hashlib.sha256(b"same").hexdigest()
    assert storage.upload_shared(local, sha) is True
    assert storage.upload_shared(local, sha) is False
    assert list(storage.shared_files()) == [sha]
    assert not any(Path(storage.staging_root).iterdir())


def test_verify_reports_missing_and_altered_files(tmp_path) -> None:
    storage = _storage(tmp_path)
    m = _manifest(storage, tmp_path, contents=(b"one", b"two", b"three"))
    assert verify_snapshot(storage, m).ok
    one, two = m.files[0], m.files[1]
    os.remove(storage.shared_path(one.sha256))
    Path(storage.shared_path(two.sha256)).write_bytes(b"tw0")
    problems = {b["name"]: b["problem"] for b in verify_snapshot(storage, m).bad}
    assert problems[one.name] == "missing"
    assert problems[two.name].startswith("checksum mismatch")
    assert len(problems) == 2


def test_prune_keeps_count_age_and_newest_verified(tmp_path) -> None:
    storage = _storage(tmp_path)
    old = _manifest(storage, tmp_path, age_h=50, contents=(b"base", b"old-only"))
    mid = _manifest(storage, tmp_path, age_h=20, contents=(b"base", b"mid-only"))
    new = _manifest(storage, tmp_path, age_h=1, contents=(b"base", b"new-only"))
    other = _manifest(storage, tmp_path, task="0_1", age_h=100, contents=(b"other",))
    report = prune(storage, keep=2, max_age=timedelta(hours=48), grace=timedelta(0), now=NOW)
    assert set(report.kept) == {new.snapshot_id, mid.snapshot_id, other.snapshot_id}
    assert report.deleted_snapshots == [old.snapshot_id]
    # "other" is older than max age but the newest verified snapshot of its task: kept.
    shared = set(storage.shared_files())
    assert hashlib.sha256(b"old-only").hexdigest() not in shared
    assert hashlib.sha256(b"base").hexdigest() in shared  # still referenced

    # The newest snapshot fails verify: keep=1 still keeps the newest that verifies.
    os.remove(storage.shared_path(hashlib.sha256(b"new-only").hexdigest()))
    report = prune(storage, keep=1, grace=timedelta(0), now=NOW)
    assert mid.snapshot_id in report.kept and report.unverified == [new.snapshot_id]
    assert all(
        verify_snapshot(storage, m).ok
        for m in list_snapshots(storage)
        if m.snapshot_id != new.snapshot_id
    )


def test_prune_spares_young_unreferenced_files_and_leftovers(tmp_path) -> None:
    storage = _storage(tmp_path)
    _manifest(storage, tmp_path, contents=(b"kept",))
    orphan = _put(storage, tmp_path, b"uploaded, manifest not yet written")
    leftover = Path(storage.staging_root) / "interrupted"
    leftover.mkdir(parents=True)
    (leftover / "x").write_bytes(b"partial")
    now = datetime.now(UTC)
    report = prune(storage, keep=5, grace=timedelta(hours=1), now=now)
    assert report.deleted_shared == [] and report.deleted_leftovers == []
    later = now + timedelta(hours=2)
    report = prune(storage, keep=5, grace=timedelta(hours=1), now=later)
    assert report.deleted_shared == [orphan.sha256]
    assert report.deleted_leftovers == [str(leftover)] and not leftover.exists()
    assert len(list_snapshots(storage)) == 1


def test_snapshot_url_defaults_next_to_the_state_dir(tmp_path) -> None:
    from statekeeper.settings import load_settings
    from statekeeper.snapshots import snapshot_url_for

    settings = load_settings(state_dir=tmp_path / "var" / "state")
    assert snapshot_url_for(settings) == (tmp_path / "var" / "snapshots").as_uri()
    settings = load_settings(snapshot_url="s3://bucket/prefix")
    assert snapshot_url_for(settings) == "s3://bucket/prefix"
