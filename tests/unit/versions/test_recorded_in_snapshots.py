"""The fingerprint in snapshot manifests (``extra.topology``: older manifests without it still
read) and the app's start check against the state root or, without a record there, the newest
snapshot. File storage in tmp dirs, no broker."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from statekeeper.app.state_version import check_state_at_start, newest_snapshot_fingerprint
from statekeeper.settings import load_settings
from statekeeper.snapshots import Manifest, SnapshotError, SnapshotStorage
from statekeeper.snapshots.manifest import new_snapshot_id
from statekeeper.snapshots.recorded_topology import newest_recorded_topology, snapshot_topology
from statekeeper.versions import (
    IncompatibleStateError,
    TopologyFingerprint,
    read_recorded,
    write_recorded,
)

from .apps import APP, Version, build, fingerprint

V1 = Version()
V2_SERDE = Version(counts_value_serde="json")


def _manifest(
    created: datetime, topology: TopologyFingerprint | None, task: str = "1_0"
) -> Manifest:
    return Manifest(
        snapshot_id=new_snapshot_id(task, "counts", 7, created),
        app=APP,
        task=task,
        store="counts",
        store_kind="rocksdb",
        layout="rocksdb-checkpoint",
        key_serde="str",
        value_serde="int",
        changelog_topic=f"{APP}-counts-changelog",
        changelog_partition=0,
        marker_offset=10,
        source_offsets={f"{APP}-words-repartition:0": 5},
        batch_id=7,
        key_count=3,
        files=[],
        created_at=created.isoformat(),
        statekeeper_version="0.1.0",
        extra={"topology": topology.to_dict()} if topology is not None else {},
    )


def test_manifest_round_trip_with_and_without_the_fingerprint() -> None:
    now = datetime.now(UTC)
    with_fp = _manifest(now, fingerprint(V1))
    read = Manifest.from_json(with_fp.to_json())
    assert read == with_fp
    assert TopologyFingerprint.from_dict(read.topology) == fingerprint(V1)
    without = Manifest.from_json(_manifest(now, None).to_json())
    assert without.topology is None
    # A manifest written before fingerprints (and before `extra` was filled) still reads.
    raw = json.loads(_manifest(now, None).to_json())
    del raw["extra"]
    assert Manifest.from_json(json.dumps(raw)).topology is None


def _storage(tmp_path: Path) -> SnapshotStorage:
    return SnapshotStorage((tmp_path / "snaps").as_uri(), APP)


def test_the_newest_snapshot_names_the_topology(tmp_path: Path) -> None:
    storage = _storage(tmp_path)
    assert newest_recorded_topology(storage) is None
    now = datetime.now(UTC)
    old = _manifest(now - timedelta(hours=2), None)
    storage.write_manifest(old)
    assert newest_recorded_topology(storage) is None  # the newest has none
    newer = _manifest(now - timedelta(hours=1), fingerprint(V1), task="1_1")
    storage.write_manifest(newer)
    found = newest_recorded_topology(storage)
    assert found is not None and found[0].snapshot_id == newer.snapshot_id
    assert TopologyFingerprint.from_dict(found[1]) == fingerprint(V1)
    assert snapshot_topology(storage, newer.snapshot_id)[0] == newer
    with pytest.raises(SnapshotError, match="records no topology fingerprint"):
        snapshot_topology(storage, old.snapshot_id)
    with pytest.raises(SnapshotError, match="has no snapshot 'nope'"):
        snapshot_topology(storage, "nope")


def _settings(tmp_path: Path, **values: object):
    return load_settings(
        application_id=APP,
        state_dir=tmp_path / "state",
        snapshot_url=(tmp_path / "snaps").as_uri(),
        **values,
    )


def test_the_app_refuses_state_an_incompatible_version_wrote(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    root = tmp_path / "state" / APP
    write_recorded(root, fingerprint(V1, partitions=4))
    with pytest.raises(IncompatibleStateError, match="store counts: value serde int -> json"):
        check_state_at_start(settings, build(V2_SERDE), {"lines": 4})
    allowed = _settings(tmp_path, allow_incompatible_state=True)
    recorded = check_state_at_start(allowed, build(V2_SERDE), {"lines": 4})
    assert read_recorded(root) == recorded == fingerprint(V2_SERDE, partitions=4)


def test_a_fresh_state_root_compares_with_the_newest_snapshot(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    assert newest_snapshot_fingerprint(settings) is None  # no snapshot storage yet
    manifest = _manifest(datetime.now(UTC), fingerprint(V1, partitions=4))
    _storage(tmp_path).write_manifest(manifest)
    where, found = newest_snapshot_fingerprint(settings)  # type: ignore[misc]
    assert (where, found) == (f"snapshot {manifest.snapshot_id}", fingerprint(V1, partitions=4))
    with pytest.raises(IncompatibleStateError, match=f"snapshot {manifest.snapshot_id}"):
        check_state_at_start(settings, build(V2_SERDE), {"lines": 4})
    assert read_recorded(tmp_path / "state" / APP) is None
    # Restores from snapshots off: the snapshots are not where the state comes from.
    off = _settings(tmp_path, restore_from_snapshots=False)
    assert newest_snapshot_fingerprint(off) is None
    check_state_at_start(off, build(V2_SERDE), {"lines": 4})
    assert read_recorded(tmp_path / "state" / APP) == fingerprint(V2_SERDE, partitions=4)
