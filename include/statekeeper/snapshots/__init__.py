"""Snapshots of task stores at commit boundaries (invariant 8, docs/invariants.md).

Modules: :mod:`manifest` (the JSON format), :mod:`staging` (checkpoint or dump one store
locally), :mod:`storage` (fsspec layout, content-addressed shared files), :mod:`create`
(stage + upload a task), :mod:`catalog` (list, verify, prune; unreadable manifests are
skipped and reported), :mod:`repair` (re-upload damaged shared files from local copies),
:mod:`install` (put a verified snapshot in place for a restore).
"""

from statekeeper.snapshots.catalog import (
    Catalog,
    PruneReport,
    UnreadableManifest,
    VerifyResult,
    latest_manifest,
    list_snapshots,
    prune,
    read_catalog,
    verify_snapshot,
)
from statekeeper.snapshots.create import (
    SnapshotResult,
    snapshot_task,
    stage_task,
    upload_staged,
)
from statekeeper.snapshots.manifest import (
    EMPTY_SHA256,
    FORMAT_VERSION,
    Manifest,
    NoSnapshotsYetError,
    SnapshotError,
    UnreadableManifestError,
)
from statekeeper.snapshots.repair import RepairReport, repair_snapshots
from statekeeper.snapshots.storage import (
    SharedFiles,
    SnapshotStorage,
    snapshot_url_for,
    storage_for,
)

__all__ = [
    "EMPTY_SHA256",
    "FORMAT_VERSION",
    "Catalog",
    "Manifest",
    "PruneReport",
    "RepairReport",
    "SharedFiles",
    "NoSnapshotsYetError",
    "SnapshotError",
    "SnapshotResult",
    "SnapshotStorage",
    "UnreadableManifest",
    "UnreadableManifestError",
    "VerifyResult",
    "latest_manifest",
    "list_snapshots",
    "prune",
    "read_catalog",
    "repair_snapshots",
    "snapshot_task",
    "snapshot_url_for",
    "storage_for",
    "stage_task",
    "upload_staged",
    "verify_snapshot",
]
