"""The topology fingerprint snapshots recorded (``Manifest.topology``): the newest one, or
one snapshot's. Kept as plain JSON here; :mod:`statekeeper.versions` reads it.

Reading stops at the newest readable manifest: every store of a snapshot run records the
same fingerprint, and manifests older than one without it are from before fingerprints were
recorded, so listing the app's manifests and reading one or two is enough (an app start on
a fresh machine asks, see ``statekeeper.app.state_version``).
"""

from __future__ import annotations

from typing import Any

from statekeeper.snapshots.manifest import Manifest, SnapshotError, UnreadableManifestError
from statekeeper.snapshots.storage import SnapshotStorage, manifest_path_parts


def newest_recorded_topology(storage: SnapshotStorage) -> tuple[Manifest, dict[str, Any]] | None:
    """The newest readable manifest and its topology fingerprint; None when there is no
    manifest, or the newest readable one has no fingerprint."""
    paths = sorted(storage.manifest_paths(), key=lambda p: manifest_path_parts(p)[2])
    for path in reversed(paths):
        try:
            manifest = storage.read_manifest(path)
        except (FileNotFoundError, UnreadableManifestError):
            continue  # pruned meanwhile, or damaged: the next older one
        topology = manifest.topology
        return (manifest, topology) if topology is not None else None
    return None


def snapshot_topology(
    storage: SnapshotStorage, snapshot_id: str
) -> tuple[Manifest, dict[str, Any]]:
    """The manifest of the snapshot ``snapshot_id`` (any task and store) and its topology
    fingerprint; :class:`SnapshotError` when there is no such snapshot or it has none."""
    paths = [p for p in storage.manifest_paths() if manifest_path_parts(p)[2] == snapshot_id]
    if not paths:
        raise SnapshotError(
            f"app {storage.app!r} has no snapshot {snapshot_id!r} (see `statekeeper snapshot list`)"
        )
    manifest = storage.read_manifest(paths[0])
    if manifest.topology is None:
        raise SnapshotError(
            f"snapshot {snapshot_id} records no topology fingerprint (taken before statekeeper "
            "recorded them)"
        )
    return manifest, manifest.topology
