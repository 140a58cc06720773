"""A worker process's background snapshot uploader: one thread, a bounded queue.

Tasks stage their stores right after a commit (the processing pause) and hand the staged
copy here; the thread hashes, uploads and writes the manifest (last), so processing goes on
meanwhile. Each finished or failed upload becomes an event (a plain dict) that the worker
sends to the driver with its next task results (:meth:`SnapshotUploader.drain`). An upload
failure is reported, never raised into processing; a full queue drops the new snapshot and
says so. A killed process leaves no manifest, so nothing half-uploaded is ever listed;
``snapshot prune`` removes what it left in the storage, and the next uploader of the same
state directory removes its local staging copies (:func:`remove_dead_staging`).
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("statekeeper.worker.snapshots")

#: Staged snapshots waiting for the uploader, per worker process, before new ones are dropped.
UPLOAD_QUEUE_SIZE = 4


@dataclass
class UploadJob:
    """One task's stores, staged at one commit, to upload."""

    request_id: str
    task_id: str
    batch_id: int | None
    staged: list[Any]  # statekeeper.snapshots.create.StagedSnapshot
    pause_ms: float  # the stores' checkpoints/dumps (what processing waited for)
    stage_ms: float  # the task's whole staging step
    snapshot_ids: dict[str, str] = field(default_factory=dict)  # store -> snapshot id

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        return {
            "event": kind,
            "request_id": self.request_id,
            "task": self.task_id,
            "batch_id": self.batch_id,
            "snapshot_ids": dict(self.snapshot_ids),
            "pause_ms": round(self.pause_ms, 3),
            "stage_ms": round(self.stage_ms, 3),
            "pid": os.getpid(),
            "at": time.time(),
            **fields,
        }

    def discard(self) -> None:
        for staged in self.staged:
            shutil.rmtree(staged.staged.directory, ignore_errors=True)


class SnapshotUploader:
    """Uploads :class:`UploadJob`s on one daemon thread, in submission order."""

    def __init__(self, storage: Callable[[], Any], queue_size: int = UPLOAD_QUEUE_SIZE) -> None:
        """``storage`` returns the :class:`~statekeeper.snapshots.storage.SnapshotStorage`
        (called on the thread, so a slow or failing storage never blocks processing)."""
        self._storage = storage
        self._queue: queue.Queue[UploadJob | None] = queue.Queue(queue_size)
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, job: UploadJob) -> bool:
        """Queue ``job``; False (and a ``failed`` event) when the queue is full."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="statekeeper-snapshot-uploader", daemon=True
                )
                self._thread.start()
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            job.discard()
            self._emit(
                job.event(
                    "failed",
                    phase="queue",
                    error=f"{self._queue.maxsize} snapshots already wait for this worker's "
                    "uploader; this one was dropped",
                )
            )
            return False
        return True

    def drain(self) -> list[dict[str, Any]]:
        """The events of uploads finished (or failed) since the last drain."""
        with self._lock:
            events, self._events = self._events, []
        return events

    @property
    def pending(self) -> int:
        """Jobs queued or uploading."""
        return self._queue.unfinished_tasks

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every queued job is done; False on timeout (tests, a graceful stop)."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def close(self, timeout_s: float = 30.0) -> None:
        """Finish the queued uploads (up to ``timeout_s``), then stop the thread; jobs still
        queued after that are dropped (no manifest, so never listed)."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is None:
            return
        self.wait_idle(timeout_s)
        while True:  # drop what is left, then the stop sentinel
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.discard()
            self._queue.task_done()
        self._queue.put(None)
        thread.join(timeout_s)

    def _emit(self, event: dict[str, Any]) -> None:
        with self._lock:
            self._events.append(event)

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                self._emit(upload_job(job, self._storage))
            finally:
                self._queue.task_done()


def upload_job(job: UploadJob, storage: Callable[[], Any]) -> dict[str, Any]:
    """Upload ``job``'s stores (manifests last) and remove its staged copy; returns its
    ``uploaded`` or ``failed`` event. Never raises: a failure is the event."""
    from statekeeper.snapshots.create import upload_staged
    from statekeeper.snapshots.storage import SharedFiles

    started = time.perf_counter()
    try:
        target = storage()
        shared = SharedFiles(target)  # the task's stores share files: one check
        results = [upload_staged(staged, target, shared=shared) for staged in job.staged]
    except Exception as exc:  # reported to the driver; processing goes on
        log.warning("task %s: snapshot upload failed: %s", job.task_id, exc)
        return job.event(
            "failed",
            phase="upload",
            error=f"{type(exc).__name__}: {exc}",
            upload_seconds=round(time.perf_counter() - started, 3),
        )
    finally:
        job.discard()
    return job.event(
        "uploaded",
        bytes_total=sum(r.bytes_total for r in results),
        bytes_uploaded=sum(r.bytes_uploaded for r in results),
        files_uploaded=sum(r.files_uploaded for r in results),
        files_healed=sum(r.files_healed for r in results),
        key_count=sum(r.manifest.key_count for r in results),
        upload_seconds=round(time.perf_counter() - started, 3),
    )


def remove_dead_staging(root: Path) -> list[Path]:
    """Remove the staging folders (``<pid>-<hex>``) under ``root`` whose process is gone (a
    killed worker's); returns them."""
    removed = []
    if not root.is_dir():
        return removed
    for entry in root.iterdir():
        pid_text = entry.name.split("-", 1)[0]
        if not entry.is_dir() or not pid_text.isdigit():
            continue
        if not _alive(int(pid_text)):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
