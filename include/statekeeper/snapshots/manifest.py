"""The snapshot manifest: what one store's snapshot holds, as JSON, written last.

A snapshot of one store of one task is a manifest plus the files it lists. The files live
content-addressed under ``<root>/<app>/shared/<sha256>`` (shared between snapshots); the
manifest lives at ``<root>/<app>/manifests/<task>/<store>/<snapshot_id>.json`` and is
uploaded only after every file it lists is in place, so a snapshot without a manifest is
never listed (invariant 8, docs/invariants.md).

Format (``format_version`` 1)::

    {"format_version": 1, "snapshot_id": "...", "app": "...", "task": "0_1",
     "store": "counts", "store_kind": "rocksdb", "layout": "rocksdb-checkpoint",
     "key_serde": "str", "value_serde": "int",
     "changelog_topic": "app-counts-changelog", "changelog_partition": 1,
     "marker_offset": 1234, "source_offsets": {"input:1": 5678}, "batch_id": 42,
     "key_count": 1000, "window": {"size_ms": ..., "grace_ms": ..., "retention_ms": ...},
     "files": [{"name": "000012.sst", "sha256": "...", "size": 4096}, ...],
     "created_at": "2026-11-25T04:00:00+00:00", "statekeeper_version": "0.1.0",
     "parent": "<snapshot_id of the previous snapshot of this task and store>" | null,
     "extra": {"topology": {<the app's topology fingerprint>}}}

``extra.topology`` is the fingerprint of the topology that wrote the state
(:mod:`statekeeper.versions.fingerprint`); manifests from before it was recorded have none.
It sits in ``extra`` because a reader takes unknown top-level fields for damage: the
statekeeper versions before it still read these manifests.

``layout`` says how to read the files: ``rocksdb-checkpoint`` (a RocksDB Checkpoint
directory, file names relative to it) or ``kv-dump`` (one ``data.kvdump`` file and the
commit's ``metadata.json``, see :mod:`statekeeper.snapshots.staging`; a custom store's
snapshots, installed through its supplier).

Empty files (RocksDB's fresh write-ahead logs, often identical across every snapshot of an
app) are listed like any other but never read back: verify and restores recreate them from
the entry (size 0, :data:`EMPTY_SHA256`), so losing their shared object harms nothing. The
object is still uploaded, for older statekeeper versions that read it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from statekeeper.errors import StatekeeperError

FORMAT_VERSION = 1

#: The key of ``Manifest.extra`` holding the topology fingerprint.
TOPOLOGY_KEY = "topology"

#: SHA-256 of zero bytes: the content address of every empty file.
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class SnapshotError(StatekeeperError):
    """A snapshot cannot be taken, read or stored; the message names the snapshot or path."""


class NoSnapshotsYetError(SnapshotError):
    """The app has no snapshot in the storage yet: a new app, or the wrong snapshot URL."""


class UnreadableManifestError(SnapshotError):
    """One manifest cannot be used; ``kind`` says why: ``invalid`` (not JSON, truncated,
    missing or unknown fields), ``newer-format``, ``foreign-app`` (another app's manifest in
    this app's folder), ``misplaced`` (its task, store or id disagree with its path) or
    ``io-error`` (the storage failed to read it)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True)
class SnapshotFile:
    """One file of a snapshot: its name inside the snapshot and its content address."""

    name: str
    sha256: str
    size: int

    @property
    def stored(self) -> bool:
        """Whether reading this file needs its shared object (every non-empty file)."""
        return self.size > 0 or self.sha256 != EMPTY_SHA256


@dataclass(frozen=True)
class Manifest:
    """Everything needed to find, check and (later) install one store's snapshot."""

    snapshot_id: str
    app: str
    task: str
    store: str
    store_kind: str
    layout: str
    key_serde: str
    value_serde: str
    changelog_topic: str | None
    changelog_partition: int
    marker_offset: int | None
    source_offsets: dict[str, int]
    batch_id: int | None
    key_count: int
    files: list[SnapshotFile]
    created_at: str
    statekeeper_version: str
    parent: str | None = None
    window: dict[str, int | None] | None = None
    format_version: int = FORMAT_VERSION
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def topology(self) -> dict[str, Any] | None:
        """The fingerprint (JSON) of the topology that wrote the state, or None when the
        manifest has none (written before fingerprints were recorded)."""
        found = self.extra.get(TOPOLOGY_KEY)
        return found if isinstance(found, dict) else None

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def created(self) -> datetime:
        return datetime.fromisoformat(self.created_at)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, indent=1)

    @classmethod
    def from_json(cls, text: str, where: str = "manifest") -> Manifest:
        """Parse a manifest; a newer format or a malformed document is an
        :class:`UnreadableManifestError` (a :class:`SnapshotError`)."""
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise UnreadableManifestError(
                f"{where} is not valid JSON (truncated?): {exc}", "invalid"
            ) from exc
        if not isinstance(raw, dict):
            raise UnreadableManifestError(f"{where}: expected a JSON object", "invalid")
        version = raw.get("format_version")
        if not isinstance(version, int):
            raise UnreadableManifestError(f"{where}: no format_version", "invalid")
        if version > FORMAT_VERSION:
            raise UnreadableManifestError(
                f"{where} has snapshot format version {version}, newer than this statekeeper "
                f"reads ({FORMAT_VERSION}); upgrade statekeeper to read it",
                "newer-format",
            )
        try:
            files = [SnapshotFile(**f) for f in raw.pop("files")]
            return cls(files=files, **raw)
        except (KeyError, TypeError, AttributeError) as exc:
            raise UnreadableManifestError(
                f"{where} is missing or has unknown fields: {exc}", "invalid"
            ) from exc


def new_snapshot_id(task: str, store: str, batch_id: int | None, now: datetime) -> str:
    """A sortable, unique-enough id: creation time first, then task, store and batch."""
    stamp = now.strftime("%Y%m%dT%H%M%S%fZ")
    return f"{stamp}-{task}-{store}-b{batch_id if batch_id is not None else 'none'}"


def utc_now() -> datetime:
    return datetime.now(UTC)
