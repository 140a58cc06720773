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

A shared file is checked (one stat or HEAD: present, right size) before a new snapshot
references it, and uploaded again from the new snapshot's local copy when it is missing or
has the wrong size (:class:`SharedFiles`), so a lost shared file heals at the next snapshot
of any store that still has it.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fsspec

from statekeeper.errors import require_extra
from statekeeper.snapshots.manifest import (
    Manifest,
    NoSnapshotsYetError,
    SnapshotError,
    UnreadableManifestError,
)


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
            require_extra("s3", "s3fs", f"snapshot storage {url!r}")
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
        if not create and not self.fs.exists(self.base):
            raise NoSnapshotsYetError(
                f"no snapshots yet of app {self.app!r} in {self.url!r} (a new app takes its "
                "first at its first snapshot interval; if it has run longer, check snapshot_url)"
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

    def shared_size(self, sha256: str) -> int | None:
        """The size of ``shared/<sha256>``, or None when it is missing (one stat or HEAD)."""
        try:
            info = self.fs.info(self.shared_path(sha256))
        except FileNotFoundError:
            return None
        if info.get("type") == "directory":
            return None
        size = info.get("size")
        return int(size) if size is not None else None

    def upload_shared(
        self, local: Path, sha256: str, *, size: int | None = None, replace: bool = False
    ) -> bool:
        """Upload ``local`` as ``shared/<sha256>`` unless it is there (with ``size``, when
        given, as its size); ``replace`` uploads it anyway (a repair of a damaged copy).
        Returns whether it uploaded."""
        if not replace:
            present = self.shared_size(sha256)
            if present is not None and (size is None or present == size):
                return False
        self.put_shared(local, sha256)
        return True

    def put_shared(self, local: Path, sha256: str) -> None:
        """Write ``local`` as ``shared/<sha256>``, replacing what is there; readers never see
        a partial file (file://: staged, then renamed; S3: a PUT appears when complete)."""
        target = self.shared_path(sha256)
        if not self.local:
            # An S3 object (multipart included) appears only once complete: no temp copy.
            self.fs.put_file(str(local), target)
            return
        upload_dir = f"{self.staging_root}/{uuid.uuid4().hex}"
        temp = f"{upload_dir}/{sha256}"
        self.fs.makedirs(upload_dir, exist_ok=True)
        self.fs.makedirs(f"{self.base}/shared", exist_ok=True)
        self.fs.put_file(str(local), temp)
        self.fs.mv(temp, target)
        self._remove_quietly(upload_dir, recursive=True)

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

    def manifest_paths(self, task: str | None = None, store: str | None = None) -> list[str]:
        """Manifest paths, of one task and/or store when given (only their folders are
        listed), sorted by path (so by snapshot id, oldest first, within a folder)."""
        parts = [
            "*" if name is None or any(c in name for c in "*?[]/") else name
            for name in (task, store)
        ]
        pattern = f"{self.base}/manifests/{parts[0]}/{parts[1]}/*.json"
        found = [str(p) for p in self.fs.glob(pattern)]
        return sorted(p for p in found if _in_folder(p, task, store))

    def read_manifest_text(self, path: str) -> str:
        """The raw text of a manifest; FileNotFoundError when it is gone, an
        :class:`UnreadableManifestError` (``io-error``) when the storage fails to read it."""
        try:
            with self.fs.open(path, "rb") as fh:
                data = fh.read()
        except FileNotFoundError:
            raise
        except Exception as exc:  # permissions, S3 errors, a directory, ...
            raise UnreadableManifestError(
                f"snapshot manifest {path} cannot be read: {type(exc).__name__}: {exc}",
                "io-error",
            ) from exc
        return data.decode("utf-8", errors="replace")

    def read_manifest(self, path: str, text: str | None = None) -> Manifest:
        """Read and check one manifest (``text``: its contents, when already read). Raises
        FileNotFoundError when it is gone (a prune between listing and reading) and an
        :class:`UnreadableManifestError` naming the path and the kind of damage otherwise."""
        if text is None:
            text = self.read_manifest_text(path)
        manifest = Manifest.from_json(text, where=f"snapshot manifest {path}")
        if manifest.app != self.app:
            raise UnreadableManifestError(
                f"snapshot manifest {path} belongs to app {manifest.app!r}, not {self.app!r}",
                "foreign-app",
            )
        task, store, snapshot_id = manifest_path_parts(path)
        if (manifest.task, manifest.store, manifest.snapshot_id) != (task, store, snapshot_id):
            raise UnreadableManifestError(
                f"snapshot manifest {path} describes task {manifest.task} store "
                f"{manifest.store} snapshot {manifest.snapshot_id}, not what its path says",
                "misplaced",
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


def manifest_path_parts(path: str) -> tuple[str, str, str]:
    """``(task, store, snapshot id)`` from a manifest path
    (``.../manifests/<task>/<store>/<snapshot_id>.json``)."""
    parts = path.rstrip("/").split("/")
    name = parts[-1]
    return parts[-3], parts[-2], name[: -len(".json")] if name.endswith(".json") else name


def _in_folder(path: str, task: str | None, store: str | None) -> bool:
    found_task, found_store, _ = manifest_path_parts(path)
    return (task is None or found_task == task) and (store is None or found_store == store)


class SharedFiles:
    """Which shared files one snapshot run (a task's stores, an app's tasks) has confirmed
    present: each is checked once (a stat or HEAD, size included) and uploaded again from
    the run's local copy when missing or of the wrong size. Thread-safe (parallel uploads).
    """

    def __init__(self, storage: SnapshotStorage) -> None:
        self.storage = storage
        self._confirmed: set[str] = set()
        self._busy: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        #: Files an earlier snapshot referenced that this run found missing (or of the wrong
        #: size) and uploaded again.
        self.healed: set[str] = set()

    def ensure(self, local: Path, sha256: str, size: int, *, known: bool = False) -> bool:
        """Make ``shared/<sha256>`` present with ``size`` bytes, uploading ``local`` when it
        is not; returns whether this call uploaded. ``known``: an earlier snapshot already
        references the file, so an upload is a repair (counted in :attr:`healed`)."""
        with self._lock:
            if sha256 in self._confirmed:
                return False
            lock = self._busy.setdefault(sha256, threading.Lock())
        with lock:  # two stores of one run sharing a file: one check, one upload
            with self._lock:
                if sha256 in self._confirmed:
                    return False
            uploaded = self.storage.upload_shared(local, sha256, size=size)
            with self._lock:
                self._confirmed.add(sha256)
                if uploaded and known:
                    self.healed.add(sha256)
        return uploaded


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
