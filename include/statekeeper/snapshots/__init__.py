"""Snapshots of task stores at commit boundaries (DESIGN.md "Operations", invariant 8).

Modules: :mod:`manifest` (the JSON format), :mod:`staging` (checkpoint or dump one store
locally), :mod:`storage` (fsspec layout, content-addressed shared files), :mod:`create`
(stage + upload a task), :mod:`catalog` (list, verify, prune).
"""

from statekeeper.snapshots.catalog import (
    PruneReport,
    VerifyResult,
    latest_manifest,
    list_snapshots,
    prune,
    verify_snapshot,
)
from statekeeper.snapshots.create import (
    SnapshotResult,
    snapshot_task,
    stage_task,
    upload_staged,
)
from statekeeper.snapshots.manifest import FORMAT_VERSION, Manifest, SnapshotError
from statekeeper.snapshots.storage import SnapshotStorage, snapshot_url_for, storage_for

__all__ = [
    "FORMAT_VERSION",
    "Manifest",
    "PruneReport",
    "SnapshotError",
    "SnapshotResult",
    "SnapshotStorage",
    "VerifyResult",
    "latest_manifest",
    "list_snapshots",
    "prune",
    "snapshot_task",
    "snapshot_url_for",
    "storage_for",
    "stage_task",
    "upload_staged",
    "verify_snapshot",
]
