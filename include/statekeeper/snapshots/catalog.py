"""The snapshot history of an app: list, verify, prune.

Only snapshots whose manifest exists are listed (a manifest is written last). Every manifest
is read on its own: one that cannot be used (unreadable, truncated, another app's, a newer
format, or not where its path says) is skipped and reported as an
:class:`UnreadableManifest` (path, kind, reason) by :func:`read_catalog`; it never hides the
other snapshots (invariant 8 in docs/invariants.md: it affects only what references it).

Prune keeps, per task and store, the newest ``keep`` snapshots that are younger than
``max_age``, and always the newest snapshot that verifies; it deletes a shared file only
when no remaining manifest references it and it is older than the grace period (an upload
in flight has files but no manifest yet), and removes staging leftovers older than the grace
period. Files an unreadable manifest may reference (every SHA-256 in its text) are kept too;
when a manifest cannot be read at all, no shared file is deleted.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from statekeeper.snapshots.manifest import Manifest, UnreadableManifestError, utc_now
from statekeeper.snapshots.storage import SnapshotStorage, manifest_path_parts

DEFAULT_GRACE = timedelta(hours=1)
_CHUNK = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")

log = logging.getLogger("statekeeper.snapshots")
_logged: set[str] = set()  # unreadable manifests already logged by this process


@dataclass(frozen=True)
class UnreadableManifest:
    """A manifest the catalog skipped: where it is, what kind of damage (see
    :class:`~statekeeper.snapshots.manifest.UnreadableManifestError`) and the reason; task,
    store and snapshot id come from its path."""

    path: str
    kind: str
    reason: str
    task: str
    store: str
    snapshot_id: str
    text: str | None = field(default=None, repr=False, compare=False)  # raw text, if read

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("text")
        return out

    def referenced(self) -> set[str] | None:
        """Every SHA-256 its text names (what it may reference), or None when its text could
        not be read (it may reference anything)."""
        return None if self.text is None else set(_SHA256.findall(self.text))


@dataclass
class Catalog:
    """What :func:`read_catalog` found: usable manifests (oldest first) and unusable ones."""

    manifests: list[Manifest] = field(default_factory=list)
    unreadable: list[UnreadableManifest] = field(default_factory=list)


def read_catalog(
    storage: SnapshotStorage, task: str | None = None, store: str | None = None
) -> Catalog:
    """Every manifest of the app (or of ``task`` and/or ``store``), each read on its own: the
    usable ones sorted by creation time then id, the others with their reasons."""
    catalog = Catalog()
    for path in storage.manifest_paths(task, store):
        text: str | None = None
        try:
            text = storage.read_manifest_text(path)
            catalog.manifests.append(storage.read_manifest(path, text))
        except FileNotFoundError:
            continue  # pruned since it was listed: gone, not damaged
        except UnreadableManifestError as exc:
            catalog.unreadable.append(_unreadable(path, exc.kind, str(exc), text))
        except Exception as exc:  # anything else one manifest raises stays with that manifest
            catalog.unreadable.append(
                _unreadable(path, "invalid", f"{path}: {type(exc).__name__}: {exc}", text)
            )
    catalog.manifests.sort(key=lambda m: (m.created_at, m.snapshot_id))
    for bad in catalog.unreadable:
        if bad.path not in _logged and len(_logged) < 10_000:
            _logged.add(bad.path)
            log.warning("skipping snapshot manifest (%s): %s", bad.kind, bad.reason)
    return catalog


def _unreadable(path: str, kind: str, reason: str, text: str | None) -> UnreadableManifest:
    task, store, snapshot_id = manifest_path_parts(path)
    return UnreadableManifest(path, kind, reason, task, store, snapshot_id, text)


def list_snapshots(
    storage: SnapshotStorage, task: str | None = None, store: str | None = None
) -> list[Manifest]:
    """Complete, usable snapshots, oldest first (by creation time, then id); unusable
    manifests are skipped (logged once; :func:`read_catalog` lists them)."""
    return read_catalog(storage, task, store).manifests


def latest_manifest(storage: SnapshotStorage, task: str, store: str) -> Manifest | None:
    """The newest usable snapshot of ``task`` and ``store`` (None when there is none)."""
    found = list_snapshots(storage, task, store)
    return found[-1] if found else None


@dataclass
class VerifyResult:
    """The outcome of re-hashing every file of one snapshot."""

    manifest: Manifest
    bad: list[dict[str, Any]] = field(default_factory=list)  # name, sha256, size, problem

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
    """Re-read every file the manifest lists and compare size and SHA-256 (empty files are
    not read: restores recreate them from the manifest)."""
    result = VerifyResult(manifest)
    for entry in manifest.files:
        if not entry.stored:
            continue
        digest, size = hashlib.sha256(), 0
        problem = None
        try:
            with storage.open_shared(entry.sha256) as fh:
                while chunk := fh.read(_CHUNK):
                    digest.update(chunk)
                    size += len(chunk)
        except FileNotFoundError:
            problem = "missing"
        if problem is None and (size != entry.size or digest.hexdigest() != entry.sha256):
            problem = f"checksum mismatch (size {size}, expected {entry.size})"
        if problem is not None:
            result.bad.append(
                {"name": entry.name, "sha256": entry.sha256, "size": entry.size, "problem": problem}
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
    unreadable: list[dict[str, Any]] = field(default_factory=list)  # skipped manifests
    #: Why unreferenced shared files were kept anyway (an unreadable manifest), or None.
    shared_kept_because: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, list) else v) for k, v in self.__dict__.items()}


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
    catalog = read_catalog(storage)
    report.unreadable = [u.as_dict() for u in catalog.unreadable]
    groups: dict[tuple[str, str], list[Manifest]] = defaultdict(list)
    for manifest in catalog.manifests:
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
    delete_shared = True
    for bad in catalog.unreadable:
        names = bad.referenced()
        if names is None:
            delete_shared = False
            report.shared_kept_because = (
                f"manifest {bad.path} cannot be read ({bad.reason}): it may reference any "
                "shared file, so none is deleted"
            )
        else:
            referenced |= names
    if delete_shared:
        for sha, mtime in storage.shared_files().items():
            if sha not in referenced and (mtime is None or now - mtime > grace):
                storage.delete_shared(sha)
                report.deleted_shared.append(sha)
    for path, mtime in storage.leftovers().items():
        if mtime is None or now - mtime > grace:
            storage.remove(path)
            report.deleted_leftovers.append(path)
    return report
