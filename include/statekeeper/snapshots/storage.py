"""Where snapshots live: an fsspec filesystem under one root URL.

Layout under ``<root>/<app>/``::

    shared/<sha256>                                 content-addressed files (incremental)
    manifests/<task>/<store>/<snapshot_id>.json     one per complete snapshot, written last
    staging/<upload_id>/<sha256>                    uploads in flight; moved into shared/

On ``file://`` a file is written to ``staging/`` and then renamed into ``shared/``, so
``shared/`` never holds a partial file; leftovers of an interrupted upload stay in
``staging/`` until prune removes them. On S3 an object becomes visible only when its upload
completes, so files go to ``shared/`` directly. ``file://`` (the default) and ``s3://``
(s3fs; credentials from the environment, endpoint from ``snapshot_s3_endpoint``) are
supported.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fsspec

from statekeeper.snapshots.manifest import Manifest, SnapshotError


def snapshot_url_for(settings: Any) -> str:
    """The snapshot root URL of ``settings`` (``snapshot_url``, else next to the state dir)."""
    url = getattr(settings, "snapshot_url", None)
    if url:
        return str(url)
    return Path(settings.state_dir).resolve().parent.joinpath("snapshots").as_uri()


class SnapshotStorage:
    """Snapshots of one app under a root URL."""

    def __init__(
        self,
        url: str,
        app: str,
        *,
        create: bool = True,
        s3_endpoint: str | None = None,
        **storage_options: Any,
    ) -> None:
        """Open ``url`` for ``app``; with ``create=False`` (readers: list, verify, prune) an
        app without any snapshot there is an error naming it, not an empty history."""
        self.url = url
        self.app = app
        if url.startswith(("s3://", "s3a://")):
            # Another process (an uploader, a prune) changes the bucket: no stale listings.
            storage_options.setdefault("use_listings_cache", False)
            if s3_endpoint:
                client = storage_options.setdefault("client_kwargs", {})
                client.setdefault("endpoint_url", s3_endpoint)
        try:
            self.fs, root = fsspec.core.url_to_fs(url, **storage_options)
        except (ImportError, ValueError) as exc:
            raise SnapshotError(f"snapshot storage {url!r}: {exc}") from exc
        self.local = self.fs.protocol in ("file", "local") or "file" in self.fs.protocol
        self.root = root.rstrip("/")
        self.base = f"{self.root}/{app}"
        self._check(create)

    def _check(self, create: bool) -> None:
        """Fail early and by name on a missing bucket, bad credentials, an unusable path or
        (readers) an app with no snapshots."""
        if self.local:
            try:
                if create:
                    self.fs.makedirs(self.base, exist_ok=True)
            except OSError as exc:
                raise SnapshotError(f"snapshot storage {self.url!r}: {exc}") from exc
        else:
            bucket = self.root.split("/", 1)[0]
            try:
                self.fs.ls(bucket, refresh=True)
            except FileNotFoundError as exc:
                raise SnapshotError(
                    f"snapshot storage {self.url!r}: bucket {bucket!r} does not exist (create "
                    "it first, statekeeper does not)"
                ) from exc
            except Exception as exc:  # permission, endpoint, credential errors of many kinds
                raise SnapshotError(
                    f"snapshot storage {self.url!r}: cannot read bucket {bucket!r}: {exc}"
                ) from exc
        if not create and not self.fs.exists(f"{self.base}/manifests"):
            raise SnapshotError(
                f"no snapshots of app {self.app!r} in {self.url!r} (unknown app, or wrong "
                "snapshot URL?)"
            )

    # -- paths -----------------------------------------------------------------------------

    def shared_path(self, sha256: str) -> str:
        return f"{self.base}/shared/{sha256}"

    def manifest_path(self, task: str, store: str, snapshot_id: str) -> str:
        return f"{self.base}/manifests/{task}/{store}/{snapshot_id}.json"

    @property
    def staging_root(self) -> str:
        return f"{self.base}/staging"

    # -- shared files ----------------------------------------------------------------------

    def has_shared(self, sha256: str) -> bool:
        return bool(self.fs.exists(self.shared_path(sha256)))

    def upload_shared(self, local: Path, sha256: str) -> bool:
        """Upload ``local`` as ``shared/<sha256>`` unless it is there; returns whether it
        uploaded."""
        target = self.shared_path(sha256)
        if self.fs.exists(target):
            return False
        if not self.local:
            # An S3 object (multipart included) appears only once complete: no temp copy.
            self.fs.put_file(str(local), target)
            return True
        upload_dir = f"{self.staging_root}/{uuid.uuid4().hex}"
        temp = f"{upload_dir}/{sha256}"
        self.fs.makedirs(upload_dir, exist_ok=True)
        self.fs.makedirs(f"{self.base}/shared", exist_ok=True)
        self.fs.put_file(str(local), temp)
        self.fs.mv(temp, target)
        self._remove_quietly(upload_dir, recursive=True)
        return True

    def open_shared(self, sha256: str) -> Any:
        return self.fs.open(self.shared_path(sha256), "rb")

    def shared_files(self) -> dict[str, datetime | None]:
        """Every shared file with its modification time (None when the store has none)."""
        try:
            entries = self.fs.ls(f"{self.base}/shared", detail=True)
        except FileNotFoundError:
            return {}
        return {e["name"].rsplit("/", 1)[-1]: _mtime(e) for e in entries if e["type"] == "file"}

    def delete_shared(self, sha256: str) -> None:
        self._remove_quietly(self.shared_path(sha256))

    # -- manifests -------------------------------------------------------------------------

    def write_manifest(self, manifest: Manifest) -> str:
        """Write the manifest (the last step of a snapshot); returns its path."""
        path = self.manifest_path(manifest.task, manifest.store, manifest.snapshot_id)
        if self.local:
            # Write then rename, so a reader never sees half a manifest.
            temp = f"{path}.partial-{uuid.uuid4().hex}"
            self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
            with self.fs.open(temp, "w") as fh:
                fh.write(manifest.to_json())
            self.fs.mv(temp, path)
        else:
            self.fs.pipe_file(path, manifest.to_json().encode())  # S3 PUT is atomic
        return path

    def manifest_paths(self) -> Iterator[str]:
        for path in self.fs.glob(f"{self.base}/manifests/*/*/*.json"):
            yield str(path)

    def read_manifest(self, path: str) -> Manifest:
        with self.fs.open(path, "r") as fh:
            manifest = Manifest.from_json(fh.read(), where=f"snapshot manifest {path}")
        if manifest.app != self.app:
            raise SnapshotError(
                f"snapshot manifest {path} belongs to app {manifest.app!r}, not {self.app!r}"
            )
        return manifest

    def delete_manifest(self, manifest: Manifest) -> None:
        self._remove_quietly(
            self.manifest_path(manifest.task, manifest.store, manifest.snapshot_id)
        )

    # -- leftovers -------------------------------------------------------------------------

    def leftovers(self) -> dict[str, datetime | None]:
        """Staging uploads and half-written manifests, with their modification times."""
        found: dict[str, datetime | None] = {}
        try:
            for entry in self.fs.ls(self.staging_root, detail=True):
                found[entry["name"]] = _newest_mtime(self.fs, entry)
        except FileNotFoundError:
            pass
        for path in self.fs.glob(f"{self.base}/manifests/*/*/*.partial-*"):
            found[str(path)] = _mtime(self.fs.info(path))
        return found

    def remove(self, path: str) -> None:
        self._remove_quietly(path, recursive=True)

    def _remove_quietly(self, path: str, recursive: bool = False) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(path, recursive=recursive)


def _mtime(entry: dict[str, Any]) -> datetime | None:
    value = entry.get("mtime") or entry.get("LastModified") or entry.get("last_modified")
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(float(value), UTC)


def _newest_mtime(fs: Any, entry: dict[str, Any]) -> datetime | None:
    if entry["type"] != "directory":
        return _mtime(entry)
    times = [_mtime(e) for e in fs.find(entry["name"], detail=True).values()]
    known = [t for t in times if t is not None]
    return max(known) if known else _mtime(entry)


def storage_for(settings: Any, *, create: bool = False) -> SnapshotStorage:
    """The snapshot storage of the app ``settings`` describe (:func:`snapshot_url_for`, the
    S3 endpoint from ``snapshot_s3_endpoint``); ``create`` makes the root where missing."""
    return SnapshotStorage(
        snapshot_url_for(settings),
        settings.application_id,
        create=create,
        s3_endpoint=getattr(settings, "snapshot_s3_endpoint", None),
    )
