"""The snapshot history of an app: list, verify, prune.

Only snapshots whose manifest exists are listed (a manifest is written last). Prune keeps,
per task and store, the newest ``keep`` snapshots that are younger than ``max_age``, and
always the newest snapshot that verifies; it deletes a shared file only when no remaining
manifest references it and it is older than the grace period (an upload in flight has
files but no manifest yet), and removes staging leftovers older than the grace period.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from statekeeper.snapshots.manifest import Manifest, utc_now
from statekeeper.snapshots.storage import SnapshotStorage

DEFAULT_GRACE = timedelta(hours=1)
_CHUNK = 1 << 20


def list_snapshots(
    storage: SnapshotStorage, task: str | None = None, store: str | None = None
) -> list[Manifest]:
    """Complete snapshots, oldest first (by creation time, then id)."""
    found = []
    for path in storage.manifest_paths():
        manifest = storage.read_manifest(path)
        if (task is None or manifest.task == task) and (store is None or manifest.store == store):
            found.append(manifest)
    return sorted(found, key=lambda m: (m.created_at, m.snapshot_id))


def latest_manifest(storage: SnapshotStorage, task: str, store: str) -> Manifest | None:
    found = list_snapshots(storage, task, store)
    return found[-1] if found else None


@dataclass
class VerifyResult:
    """The outcome of re-hashing every file of one snapshot."""

    manifest: Manifest
    bad: list[dict[str, Any]] = field(default_factory=list)  # name, sha256, problem

    @property
    def ok(self) -> bool:
        return not self.bad

    def as_dict(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "snapshot_id": m.snapshot_id,
            "task": m.task,
            "store": m.store,
            "ok": self.ok,
            "files": len(m.files),
            "bad": self.bad,
        }


def verify_snapshot(storage: SnapshotStorage, manifest: Manifest) -> VerifyResult:
    """Re-read every file the manifest lists and compare size and SHA-256."""
    result = VerifyResult(manifest)
    for entry in manifest.files:
        digest, size = hashlib.sha256(), 0
        try:
            with storage.open_shared(entry.sha256) as fh:
                while chunk := fh.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
        except FileNotFoundError:
            result.bad.append({"name": entry.name, "sha256": entry.sha256, "problem": "missing"})
            continue
        if size != entry.size or digest.hexdigest() != entry.sha256:
            result.bad.append(
                {
                    "name": entry.name,
                    "sha256": entry.sha256,
                    "problem": f"checksum mismatch (size {size}, expected {entry.size})",
                }
            )
    return result


@dataclass
class PruneReport:
    """What prune kept and removed."""

    kept: list[str] = field(default_factory=list)
    deleted_snapshots: list[str] = field(default_factory=list)
    deleted_shared: list[str] = field(default_factory=list)
    deleted_leftovers: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)  # newer snapshots that failed verify

    def as_dict(self) -> dict[str, Any]:
        return {k: list(v) for k, v in self.__dict__.items()}


def prune(
    storage: SnapshotStorage,
    *,
    keep: int | None = None,
    max_age: timedelta | None = None,
    grace: timedelta = DEFAULT_GRACE,
    now: datetime | None = None,
) -> PruneReport:
    """Apply retention (module docstring); ``keep``/``max_age`` None means no such limit."""
    if keep is not None and keep < 0:
        raise ValueError("keep must be >= 0")
    now = now or utc_now()
    report = PruneReport()
    groups: dict[tuple[str, str], list[Manifest]] = defaultdict(list)
    for manifest in list_snapshots(storage):
        groups[(manifest.task, manifest.store)].append(manifest)
    kept: list[Manifest] = []
    for manifests in groups.values():
        newest_first = manifests[::-1]
        keep_ids = {
            m.snapshot_id
            for i, m in enumerate(newest_first)
            if (keep is None or i < keep) and (max_age is None or now - m.created <= max_age)
        }
        for m in newest_first:  # the newest verified snapshot always stays
            if verify_snapshot(storage, m).ok:
                keep_ids.add(m.snapshot_id)
                break
            report.unverified.append(m.snapshot_id)
        for m in newest_first:
            if m.snapshot_id in keep_ids:
                kept.append(m)
                report.kept.append(m.snapshot_id)
            else:
                storage.delete_manifest(m)
                report.deleted_snapshots.append(m.snapshot_id)
    referenced = {f.sha256 for m in kept for f in m.files}
    for sha, mtime in storage.shared_files().items():
        if sha not in referenced and (mtime is None or now - mtime > grace):
            storage.delete_shared(sha)
            report.deleted_shared.append(sha)
    for path, mtime in storage.leftovers().items():
        if mtime is None or now - mtime > grace:
            storage.remove(path)
            report.deleted_leftovers.append(path)
    return report
