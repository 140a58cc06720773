"""Snapshot manifest, kv-dump and catalog logic on file:// storage in tmp dirs (no broker)."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from statekeeper.snapshots import (
    EMPTY_SHA256,
    FORMAT_VERSION,
    Manifest,
    SharedFiles,
    SnapshotError,
    SnapshotStorage,
    latest_manifest,
    list_snapshots,
    prune,
    read_catalog,
    repair_snapshots,
    verify_snapshot,
)
from statekeeper.snapshots.manifest import SnapshotFile, UnreadableManifestError, new_snapshot_id
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
    with pytest.raises(UnreadableManifestError, match="not valid JSON") as failure:
        Manifest.from_json("{", where="x.json")
    assert failure.value.kind == "invalid"


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
    # A manifest of another app in this app's folder is skipped, its reason naming both.
    foreign = json.loads(m.to_json()) | {"app": "other", "snapshot_id": "foreign"}
    Path(storage.manifest_path("0_0", "kv", "foreign")).write_text(json.dumps(foreign))
    assert [x.snapshot_id for x in list_snapshots(storage)] == [m.snapshot_id]
    [skipped] = read_catalog(storage).unreadable
    assert skipped.kind == "foreign-app" and skipped.snapshot_id == "foreign"
    assert "belongs to app 'other', not 'app'" in skipped.reason
    with pytest.raises(SnapshotError, match="no snapshots yet of app 'ghost'"):
        SnapshotStorage((tmp_path / "snaps").as_uri(), "ghost", create=False)


def test_every_manifest_is_read_on_its_own(tmp_path) -> None:
    """Truncated, garbage, newer-format, foreign and misplaced manifests are each skipped
    with their kind and reason; every other snapshot is listed, of any task."""
    storage = _storage(tmp_path)
    a1 = _manifest(storage, tmp_path, task="0_0", age_h=2, contents=(b"a1",))
    a2 = _manifest(storage, tmp_path, task="0_0", age_h=1, contents=(b"a2",))
    b1 = _manifest(storage, tmp_path, task="0_1", age_h=1, contents=(b"b1",))
    path_a2 = Path(storage.manifest_path("0_0", "kv", a2.snapshot_id))
    path_a2.write_text(path_a2.read_text()[:40])  # truncated
    raw = json.loads(a1.to_json())
    damaged = {
        "garbage": b"\xff\x00 not json",
        "newer": json.dumps(raw | {"format_version": FORMAT_VERSION + 1, "snapshot_id": "newer"}),
        "foreign": json.dumps(raw | {"app": "other", "snapshot_id": "foreign"}),
        "misplaced": json.dumps(raw),  # a1's manifest under another id
        "fields": json.dumps(raw | {"snapshot_id": "fields", "files": 3}),
    }
    for name, text in damaged.items():
        target = Path(storage.manifest_path("0_1", "kv", name))
        target.write_bytes(text if isinstance(text, bytes) else text.encode())
    catalog = read_catalog(storage)
    assert [m.snapshot_id for m in catalog.manifests] == [a1.snapshot_id, b1.snapshot_id]
    kinds = {u.snapshot_id: u.kind for u in catalog.unreadable}
    assert kinds == {
        a2.snapshot_id: "invalid",
        "garbage": "invalid",
        "newer": "newer-format",
        "foreign": "foreign-app",
        "misplaced": "misplaced",
        "fields": "invalid",
    }
    truncated = next(u for u in catalog.unreadable if u.snapshot_id == a2.snapshot_id)
    assert truncated.task == "0_0" and truncated.store == "kv"
    assert (
        truncated.path.endswith(f"{a2.snapshot_id}.json") and "not valid JSON" in truncated.reason
    )
    # A reader of one task and store lists only that folder: 0_1's damage is not read.
    only = read_catalog(storage, "0_0", "kv")
    assert [m.snapshot_id for m in only.manifests] == [a1.snapshot_id]
    assert [u.snapshot_id for u in only.unreadable] == [a2.snapshot_id]
    assert latest_manifest(storage, "0_0", "kv") == a1
    assert latest_manifest(storage, "0_1", "kv") == b1


def test_an_empty_catalog_is_an_empty_list(tmp_path) -> None:
    storage = _storage(tmp_path)  # the app's folder exists, no snapshot finished yet
    reader = SnapshotStorage((tmp_path / "snaps").as_uri(), APP, create=False)
    assert list_snapshots(reader) == [] and read_catalog(storage).unreadable == []


def test_empty_files_are_never_read_from_the_storage(tmp_path) -> None:
    storage = _storage(tmp_path)
    m = _manifest(storage, tmp_path, contents=(b"", b"data"))
    empty = next(f for f in m.files if f.size == 0)
    assert empty.sha256 == EMPTY_SHA256 and not empty.stored
    os.remove(storage.shared_path(EMPTY_SHA256))  # one object all snapshots would share
    assert verify_snapshot(storage, m).ok


def test_a_snapshot_run_checks_each_shared_file_once_and_heals_lost_ones(tmp_path) -> None:
    storage = _storage(tmp_path)
    local = tmp_path / "local"
    local.write_bytes(b"shared content")
    sha = hashlib.sha256(b"shared content").hexdigest()
    run = SharedFiles(storage)
    assert run.ensure(local, sha, 14) is True  # new: uploaded
    Path(storage.shared_path(sha)).unlink()
    assert run.ensure(local, sha, 14, known=True) is False  # confirmed once per run
    assert not storage.has_shared(sha)
    later = SharedFiles(storage)  # the next snapshot run checks again and heals
    assert later.ensure(local, sha, 14, known=True) is True and later.healed == {sha}
    Path(storage.shared_path(sha)).write_bytes(b"short")  # truncated: the size tells
    assert SharedFiles(storage).ensure(local, sha, 14, known=True) is True
    assert Path(storage.shared_path(sha)).read_bytes() == b"shared content"
    assert SharedFiles(storage).ensure(local, sha, 14) is False  # present: no upload


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


def test_prune_keeps_what_unreadable_manifests_may_reference(tmp_path) -> None:
    storage = _storage(tmp_path)
    old = _manifest(storage, tmp_path, age_h=3, contents=(b"old-only", b"base"))
    new = _manifest(storage, tmp_path, age_h=1, contents=(b"new-only", b"base"))
    damaged = _manifest(storage, tmp_path, task="0_1", contents=(b"damaged-only",))
    path = Path(storage.manifest_path("0_1", "kv", damaged.snapshot_id))
    text = path.read_text()
    path.write_text(text[: text.index(damaged.files[0].sha256) + 64])  # truncated after it
    report = prune(storage, keep=1, grace=timedelta(0), now=NOW)
    assert report.deleted_snapshots == [old.snapshot_id] and report.kept == [new.snapshot_id]
    assert [u["snapshot_id"] for u in report.unreadable] == [damaged.snapshot_id]
    shared = set(storage.shared_files())
    assert damaged.files[0].sha256 in shared  # named in the unreadable manifest's text
    assert hashlib.sha256(b"old-only").hexdigest() not in shared
    assert path.exists()  # prune never deletes an unreadable manifest

    # A manifest that cannot be read at all may reference anything: nothing shared goes.
    path.unlink()
    path.mkdir()  # reading a directory fails
    stray = _put(storage, tmp_path, b"unreferenced")
    report = prune(storage, keep=1, grace=timedelta(0), now=NOW)
    assert report.deleted_shared == [] and report.shared_kept_because
    assert storage.has_shared(stray.sha256)


def test_repair_uploads_what_local_copies_have(tmp_path) -> None:
    storage = _storage(tmp_path)
    m = _manifest(storage, tmp_path, contents=(b"has a copy", b"lost for good", b"altered"))
    copy, lost, altered = m.files
    local = tmp_path / "state" / "app" / "0_0" / "rocksdb" / "kv"
    local.mkdir(parents=True)
    (local / copy.name).write_bytes(b"has a copy")
    (local / "renamed").write_bytes(b"altered")  # found by its content, not its name
    (local / "same-size").write_bytes(b"lost for gooD")  # right size, wrong content
    for f in m.files:
        os.remove(storage.shared_path(f.sha256))
    Path(storage.shared_path(altered.sha256)).write_bytes(b"alterd!")
    before = verify_snapshot(storage, m)
    assert {b["name"] for b in before.bad} == {copy.name, lost.name, altered.name}
    report = repair_snapshots(storage, [before], [tmp_path / "state"])
    assert {f["name"] for f in report.repaired} == {copy.name, altered.name}
    assert report.repaired[0]["source"].startswith(str(local))
    [unrepairable] = report.unrepairable
    assert unrepairable["name"] == lost.name and unrepairable["snapshots"] == [m.snapshot_id]
    [after] = report.results
    assert [b["name"] for b in after.bad] == [lost.name]
    assert (local / "same-size").read_bytes() == b"lost for gooD"  # local files untouched
