"""Repair damaged snapshots from local copies (``statekeeper snapshot verify --repair``).

Shared files are content-addressed, so any local file whose SHA-256 matches a missing or
damaged shared file is a valid copy of it, wherever it lies: a task's live RocksDB directory
(SST files never change once written and keep their names), a staged checkpoint copy,
another task's or store's identical file (OPTIONS, an empty log). For each bad file the
local files of the same size under the search roots are hashed (same name first); a match is
copied aside, hashed again (a live file may change meanwhile) and uploaded, replacing a
damaged object. Whatever no local copy supplies is reported unrepairable, with the snapshots
that need it. Only shared files are written: manifests and local files are never changed.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.snapshots.catalog import VerifyResult, verify_snapshot
from statekeeper.snapshots.storage import SnapshotStorage

log = logging.getLogger("statekeeper.snapshots")

_CHUNK = 1 << 20


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class LocalCopies:
    """Regular files under ``roots``, indexed by size on first use, hashed on demand."""

    def __init__(self, roots: Iterable[Path]) -> None:
        self.roots = [Path(r) for r in roots]
        self._by_size: dict[int, list[Path]] | None = None
        self._hashes: dict[Path, str] = {}

    def _index(self) -> dict[int, list[Path]]:
        if self._by_size is None:
            self._by_size = defaultdict(list)
            for root in self.roots:
                for folder, _dirs, names in os.walk(root):
                    for name in names:
                        path = Path(folder) / name
                        try:
                            if path.is_symlink() or not path.is_file():
                                continue
                            self._by_size[path.stat().st_size].append(path)
                        except OSError:
                            continue
        return self._by_size

    def candidates(self, size: int, name: str) -> list[Path]:
        """Local files of ``size`` bytes, those called ``name`` first."""
        found = self._index().get(size, [])
        return sorted(found, key=lambda p: (p.name != name, str(p)))

    def copy_of(self, sha256: str, size: int, name: str, into: Path) -> Path | None:
        """A verified copy (in the folder ``into``) of the file with this content, or
        None when no local file has it."""
        for path in self.candidates(size, name):
            try:
                if path not in self._hashes:
                    self._hashes[path] = _sha256(path)
                if self._hashes[path] != sha256:
                    continue
                copy = into / sha256
                shutil.copyfile(path, copy)
            except OSError:  # gone or unreadable meanwhile: try the next one
                continue
            if _sha256(copy) == sha256:
                return copy
            copy.unlink(missing_ok=True)
        return None

    def source_of(self, sha256: str) -> str | None:
        """The local path whose hash matched ``sha256`` (after :meth:`copy_of`)."""
        return next((str(p) for p, h in self._hashes.items() if h == sha256), None)


@dataclass
class RepairReport:
    """What a repair did: per file, ``repaired`` (with the local source) or ``unrepairable``
    (with the snapshots still broken by it); ``results`` re-verifies every snapshot given."""

    repaired: list[dict[str, Any]] = field(default_factory=list)
    unrepairable: list[dict[str, Any]] = field(default_factory=list)
    results: list[VerifyResult] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "repaired": list(self.repaired),
            "unrepairable": list(self.unrepairable),
            "snapshots": [r.as_dict() for r in self.results],
        }


def repair_snapshots(
    storage: SnapshotStorage, results: list[VerifyResult], roots: Iterable[Path]
) -> RepairReport:
    """Upload, from local copies under ``roots``, every file the failed ``results`` (from
    :func:`~statekeeper.snapshots.catalog.verify_snapshot`) name; then verify again."""
    report = RepairReport()
    wanted: dict[str, dict[str, Any]] = {}  # sha256 -> file, problem, snapshots
    for result in results:
        for bad in result.bad:
            entry = wanted.setdefault(
                bad["sha256"],
                {
                    "sha256": bad["sha256"],
                    "name": bad["name"],
                    "size": _size_of(result, bad),
                    "problem": bad["problem"],
                    "snapshots": [],
                },
            )
            entry["snapshots"].append(result.manifest.snapshot_id)
    if wanted:
        copies = LocalCopies(roots)
        with tempfile.TemporaryDirectory(prefix="statekeeper-repair-") as temp:
            for sha, entry in sorted(wanted.items(), key=lambda kv: kv[1]["name"]):
                copy = copies.copy_of(sha, entry["size"], entry["name"], Path(temp))
                if copy is None:
                    report.unrepairable.append(
                        {**entry, "reason": "no local copy with this SHA-256 and size"}
                    )
                    continue
                try:
                    storage.put_shared(copy, sha)
                except Exception as exc:  # reported per file; the others go on
                    report.unrepairable.append(
                        {**entry, "reason": f"upload failed: {type(exc).__name__}: {exc}"}
                    )
                    continue
                finally:
                    copy.unlink(missing_ok=True)
                source = copies.source_of(sha)
                log.info("repaired shared file %s (%s) from %s", sha, entry["name"], source)
                report.repaired.append({**entry, "source": source})
    broken = {r.manifest.snapshot_id for r in results if not r.ok}
    report.results = [
        verify_snapshot(storage, r.manifest) if r.manifest.snapshot_id in broken else r
        for r in results
    ]
    return report


def _size_of(result: VerifyResult, bad: dict[str, Any]) -> int:
    if "size" in bad:
        return int(bad["size"])
    entry = next(f for f in result.manifest.files if f.sha256 == bad["sha256"])
    return entry.size


def default_roots(settings: Any) -> list[Path]:
    """Where local copies are looked for: the app's state directory (its tasks' live stores
    and staged snapshot copies), when it exists."""
    root = Path(settings.state_dir)
    return [root] if root.is_dir() else []
