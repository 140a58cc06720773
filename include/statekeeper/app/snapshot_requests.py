"""The driver's side of snapshots taken inside the running app.

A snapshot is due when asked for (``POST /snapshot`` on the status endpoint,
``statekeeper snapshot create`` against a running app) or when ``snapshot_interval_s`` has
passed since the last scheduled one. The next batch :meth:`takes <SnapshotRequests.take>`
the request: its task runs carry the request id (every stateful task, those without input
as commit-only runs), each task commits and stages right after its commit, and its
worker uploads in the background. Events come back in the task results (``staged`` with
the batch, at once; ``uploaded``/``failed`` with that worker's later results) and, so an
idle app still sees its uploads finish, the driver also checks the snapshot storage for the
staged snapshots' manifests (:meth:`confirm_uploads`). Pure bookkeeping: no Spark here.

A request is ``pending`` → ``running`` (taken by a batch) → ``uploaded`` (every task
uploaded or had nothing committed to snapshot) or ``failed`` (some task's staging or upload
failed; the errors are listed). The status document shows the requests under
``snapshot_requests`` and, per task, the last snapshot under ``tasks.<id>.snapshot``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("statekeeper.app.snapshots")

#: Requests kept in the status document (the newest).
KEEP_REQUESTS = 20
FINAL = ("uploaded", "failed")
_IDENTITY = ("request_id", "batch_id", "snapshot_ids")
_EVENT_FIELDS = (
    "request_id",
    "batch_id",
    "snapshot_ids",
    "pause_ms",
    "stage_ms",
    "bytes_total",
    "bytes_uploaded",
    "files_uploaded",
    "key_count",
    "upload_seconds",
    "pid",
    "phase",
    "error",
    "reason",
)


class SnapshotRequests:
    """Thread-safe: the status server's thread asks, the batch thread takes, the
    supervisor confirms uploads."""

    def __init__(self, interval_s: float = 0.0, storage: Callable[[], Any] | None = None) -> None:
        """``interval_s``: the schedule (0 = only on request). ``storage`` returns the
        app's SnapshotStorage, for :meth:`confirm_uploads`."""
        self.interval_s = interval_s
        self._storage = storage
        self._lock = threading.Lock()
        self._requests: dict[str, dict[str, Any]] = {}  # insertion order = age
        self._tasks: dict[str, dict[str, Any]] = {}  # task id -> its last snapshot
        self._last_scheduled = time.monotonic()
        self._last_taken: float | None = None  # monotonic time the last request was taken

    # -- asking ------------------------------------------------------------------------------

    def request(self, source: str = "endpoint") -> dict[str, Any]:
        """A new request (or the one already pending, which this joins)."""
        with self._lock:
            for entry in self._requests.values():
                if entry["state"] == "pending":
                    return _public(entry)
            request_id = (
                f"snap-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:6]}"
            )
            entry = {
                "request_id": request_id,
                "source": source,
                "state": "pending",
                "requested_at": time.time(),
                "batch_id": None,
                "tasks": {},
                "errors": [],
            }
            self._requests[request_id] = entry
            for old in list(self._requests)[:-KEEP_REQUESTS]:
                if self._requests[old]["state"] in FINAL:
                    del self._requests[old]
            log.info("snapshot %s requested (%s)", request_id, source)
            return _public(entry)

    def schedule(self, last_batch_end: float, now: float | None = None) -> None:
        """Ask for a scheduled snapshot when the interval passed, none is under way and a
        batch ran (``last_batch_end``, monotonic) since the last snapshot was taken: an idle
        app's state has not changed, so it is not snapshotted again."""
        if self.interval_s <= 0:
            return
        now = time.monotonic() if now is None else now
        with self._lock:
            busy = any(e["state"] not in FINAL for e in self._requests.values())
            unchanged = self._last_taken is not None and last_batch_end <= self._last_taken
            if busy or unchanged or now - self._last_scheduled < self.interval_s:
                return
            self._last_scheduled = now
        self.request("schedule")

    @property
    def pending(self) -> bool:
        with self._lock:
            return any(e["state"] == "pending" for e in self._requests.values())

    @property
    def running(self) -> bool:
        """Whether a taken request still waits for uploads."""
        with self._lock:
            return any(e["state"] == "running" for e in self._requests.values())

    def fail(self, request_id: str, error: str) -> None:
        """End a request that could not be carried out (its pass failed)."""
        with self._lock:
            entry = self._requests.get(request_id)
            if entry is not None and entry["state"] not in FINAL:
                entry["errors"].append({"task": None, "phase": "run", "error": error})
                entry.update(state="failed", finished_at=time.time())

    # -- taking ------------------------------------------------------------------------------

    def take(self, batch_id: int | None, tasks: Iterable[str]) -> str | None:
        """The pending request, now ``running`` for ``tasks`` in batch ``batch_id`` (None
        when nothing is pending). With no task to snapshot it is ``uploaded`` at once."""
        with self._lock:
            entry = next((e for e in self._requests.values() if e["state"] == "pending"), None)
            if entry is None:
                return None
            entry.update(state="running", batch_id=batch_id, taken_at=time.time())
            self._last_taken = time.monotonic()
            entry["tasks"] = {tid: "requested" for tid in sorted(tasks)}
            self._settle(entry)
            return str(entry["request_id"])

    # -- what comes back -----------------------------------------------------------------------

    def note_events(self, events: Iterable[dict[str, Any]]) -> None:
        """Take in workers' snapshot events (``staged``, ``uploaded``, ``failed``,
        ``skipped``; see statekeeper.worker.snapshot_uploader)."""
        with self._lock:
            for event in events:
                self._note(event)

    def _note(self, event: dict[str, Any]) -> None:
        kind, tid = event.get("event"), event.get("task")
        entry = self._requests.get(event.get("request_id", ""))
        if entry is not None and tid in entry["tasks"]:
            current = entry["tasks"][tid]
            # "uploaded"/"failed" are final; a late "staged" does not undo them.
            if current not in FINAL or kind in FINAL:
                entry["tasks"][tid] = kind
            if kind == "failed":
                entry["errors"].append(
                    {"task": tid, "phase": event.get("phase"), "error": event.get("error")}
                )
            self._settle(entry)
        task = self._tasks.setdefault(str(tid), {})
        same = task.get("request_id") == event.get("request_id")
        if not same and kind == "uploaded":  # a late report of an older snapshot
            task["last_uploaded"] = _uploaded(event, event.get("at"))
            return
        if kind == "staged" or not same:
            last = task.get("last_uploaded")
            task.clear()
            if last is not None:
                task["last_uploaded"] = last
        task.update({k: event[k] for k in _EVENT_FIELDS if k in event})
        task["state"] = kind
        task["updated_at"] = event.get("at", time.time())
        if kind == "uploaded":
            task["last_uploaded"] = _uploaded(event, event.get("at"))

    def confirm_uploads(self) -> None:
        """Mark staged snapshots whose manifests are in the storage as uploaded (their
        workers report bytes and seconds with their next results)."""
        if self._storage is None:
            return
        with self._lock:
            staged = [
                (entry, tid, dict(self._tasks.get(tid, {}).get("snapshot_ids") or {}))
                for entry in self._requests.values()
                if entry["state"] == "running"
                for tid, state in entry["tasks"].items()
                if state == "staged"
                and self._tasks.get(tid, {}).get("request_id") == entry["request_id"]
            ]
        if not staged:
            return
        try:
            storage = self._storage()
            done = [
                (entry, tid)
                for entry, tid, ids in staged
                if ids
                and all(
                    storage.fs.exists(storage.manifest_path(tid, store, sid))
                    for store, sid in ids.items()
                )
            ]
        except Exception as exc:  # the status must not break on a storage hiccup
            log.warning("checking snapshot uploads failed: %s", exc)
            return
        with self._lock:
            for entry, tid in done:
                if entry["tasks"].get(tid) == "staged":
                    entry["tasks"][tid] = "uploaded"
                    task = self._tasks.get(tid, {})
                    if task.get("request_id") == entry["request_id"]:
                        task["state"] = "uploaded"
                        task["last_uploaded"] = _uploaded(task, time.time())
                    self._settle(entry)

    def _settle(self, entry: dict[str, Any]) -> None:
        states = set(entry["tasks"].values())
        if entry["state"] != "running" or not states <= {"uploaded", "skipped", "failed"}:
            return
        entry["state"] = "failed" if "failed" in states else "uploaded"
        entry["finished_at"] = time.time()
        log.info("snapshot %s %s", entry["request_id"], entry["state"])

    # -- status --------------------------------------------------------------------------------

    def status(self) -> dict[str, dict[str, Any]]:
        """``snapshot_requests`` of the status document, by request id."""
        with self._lock:
            return {rid: _public(e) for rid, e in self._requests.items()}

    def task_status(self) -> dict[str, dict[str, Any]]:
        """Per task: its last snapshot (``tasks.<id>.snapshot``)."""
        with self._lock:
            return {tid: dict(t) for tid, t in self._tasks.items()}


def _uploaded(source: dict[str, Any], at: float | None) -> dict[str, Any]:
    """``last_uploaded`` of a task: the snapshot's identity and when its upload was seen
    (``uploaded_at``, epoch seconds: the metrics' snapshot age)."""
    return {**{k: source.get(k) for k in _IDENTITY}, "uploaded_at": at or time.time()}


def _public(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        **{k: v for k, v in entry.items() if k not in ("tasks", "errors")},
        "tasks": dict(entry["tasks"]),
        "errors": list(entry["errors"]),
    }
