"""Snapshot every task of an app (``statekeeper snapshot create``), running or stopped.

A running app (its status endpoint answers, found through its status file) is asked on
``POST /snapshot``; every task snapshots itself at its next commit and uploads in the
background, and :func:`snapshot_running_app` waits (bounded) until the status document says
the request is uploaded or failed. A stopped app's task directories under
``<state_dir>/<app>/`` are opened through the :class:`StateEnvironment` (which takes the task
lock and replays any changelog tail, so the task sits at its last commit) and snapshotted
store by store (:func:`snapshot_app`).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from statekeeper.settings import StatekeeperSettings
from statekeeper.snapshots.create import SnapshotResult, snapshot_task
from statekeeper.snapshots.manifest import SnapshotError
from statekeeper.snapshots.storage import SharedFiles, SnapshotStorage
from statekeeper.state.environment import StateEnvironment
from statekeeper.state.task_id import TaskId
from statekeeper.versions.fingerprint import FingerprintError
from statekeeper.versions.recorded import read_recorded, state_root


def local_tasks(settings: StatekeeperSettings, topology: Any) -> list[tuple[str, int, int]]:
    """``(task id, subtopology, partition)`` of every stateful task with a local directory."""
    app_dir = Path(settings.state_dir) / settings.application_id
    if not app_dir.is_dir():
        raise SnapshotError(
            f"no local state for app {settings.application_id!r} under {settings.state_dir} "
            "(wrong app, or state_dir not set as when the app ran?)"
        )
    stateful = {sub.id for sub in topology.subtopologies if topology.store_specs(sub.id)}
    found = []
    for entry in sorted(app_dir.iterdir()):
        tid = TaskId.try_parse(entry.name)
        if entry.is_dir() and tid is not None and tid.subtopology in stateful:
            found.append((entry.name, tid.subtopology, tid.partition))
    return sorted(found, key=lambda t: (t[1], t[2]))


def snapshot_app(
    settings: StatekeeperSettings,
    topology: Any,
    storage: SnapshotStorage,
    *,
    tasks: list[str] | None = None,
    stores: list[str] | None = None,
    staging_dir: Path | None = None,
) -> list[SnapshotResult]:
    """Snapshot the app's local tasks (or only ``tasks``) and stores (or only ``stores``)."""
    found = local_tasks(settings, topology)
    if tasks is not None:
        unknown = sorted(set(tasks) - {t for t, _, _ in found})
        if unknown:
            raise SnapshotError(
                f"app {settings.application_id!r} has no local task {unknown}; "
                f"tasks: {[t for t, _, _ in found]}"
            )
        found = [t for t in found if t[0] in tasks]
    staging = staging_dir or Path(settings.state_dir) / ".snapshot-staging"
    topology_record = _recorded_topology(settings)
    env = StateEnvironment(settings)
    results: list[SnapshotResult] = []
    shared = SharedFiles(storage)  # each shared file checked once for the whole run
    try:
        for task_id, sub, partition in found:
            specs = topology.store_specs(sub)
            names = [s.name for s in specs if stores is None or s.name in stores]
            if not names:
                continue
            with env.task(task_id, partition, specs) as task:
                results.extend(
                    snapshot_task(
                        task,
                        storage,
                        staging,
                        stores=names,
                        shared=shared,
                        topology=topology_record,
                    )
                )
    finally:
        env.close()
    return results


def _recorded_topology(settings: StatekeeperSettings) -> dict[str, Any] | None:
    """The fingerprint the app recorded in its state root when it last started (what wrote
    the state), for the manifests; None when there is none or it cannot be read."""
    try:
        recorded = read_recorded(state_root(settings.state_dir, settings.application_id))
    except FingerprintError:
        return None
    return recorded.to_dict() if recorded is not None else None


def running_app_status_url(settings: StatekeeperSettings) -> str | None:
    """The status URL of the app if it runs now (its status file names an endpoint that
    answers), else None."""
    try:
        doc = json.loads(settings.status_path().read_text())
    except (OSError, ValueError):
        return None
    url = doc.get("status_url")
    if not url or doc.get("state") in ("NOT_RUNNING", "ERROR"):
        return None
    try:
        _get(url, timeout_s=2.0)
    except OSError:  # a stale status file of an app that is gone
        return None
    return str(url)


def snapshot_running_app(
    status_url: str, timeout_s: float = 300.0, poll_s: float = 0.5
) -> dict[str, Any]:
    """Ask the running app at ``status_url`` for a snapshot and wait until it is uploaded or
    failed; returns the request (``state``, ``batch_id``, ``tasks``, ``errors``) with
    ``snapshots``: one row per task and store (snapshot id, pause, bytes). Raises
    :class:`SnapshotError` when the app refuses or ``timeout_s`` passes first."""
    base = status_url.rsplit("/", 1)[0]
    post = urllib.request.Request(f"{base}/snapshot", data=b"{}", method="POST")
    post.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(post, timeout=10) as resp:
            request_id = json.load(resp)["request_id"]
    except urllib.error.HTTPError as exc:
        raise SnapshotError(
            f"the app at {status_url} refused the snapshot: {exc.read().decode(errors='replace')}"
        ) from exc
    except (OSError, ValueError, KeyError) as exc:
        raise SnapshotError(f"cannot ask the app at {status_url} for a snapshot: {exc}") from exc
    deadline = time.monotonic() + timeout_s
    while True:
        doc = _get(status_url, timeout_s=10.0)
        request = (doc.get("snapshot_requests") or {}).get(request_id)
        if request is not None and request.get("state") in ("uploaded", "failed"):
            break
        if time.monotonic() > deadline:
            state = request.get("state") if request else "unknown"
            raise SnapshotError(
                f"snapshot {request_id} of the app at {status_url} is still {state} after "
                f"{timeout_s:.0f}s (see snapshot_requests in its status)"
            )
        time.sleep(poll_s)
    rows = []
    for tid in sorted(request.get("tasks", {})):
        snap = (doc.get("tasks", {}).get(tid) or {}).get("snapshot") or {}
        for store, snapshot_id in sorted((snap.get("snapshot_ids") or {}).items()):
            rows.append(
                {
                    "task": tid,
                    "store": store,
                    "snapshot_id": snapshot_id,
                    "batch_id": snap.get("batch_id"),
                    "state": request["tasks"][tid],
                    "pause_ms": snap.get("pause_ms"),
                    "bytes_uploaded": snap.get("bytes_uploaded"),  # None until reported
                    "upload_seconds": snap.get("upload_seconds"),
                }
            )
    return {**request, "snapshots": rows}


def snapshot_now(
    settings: StatekeeperSettings, topology: Any, storage: Any, timeout_s: float = 300.0
) -> dict[str, Any]:
    """Snapshot every task and store of the app now: running (its status endpoint answers),
    at its next commit, waiting up to ``timeout_s`` for the upload; stopped, from its local
    state. Returns ``running``, ``snapshot_ids`` and, for a running app, ``request_id``.
    Raises :class:`~statekeeper.snapshots.manifest.SnapshotError` when it fails."""
    status_url = running_app_status_url(settings)
    if status_url is not None:
        request = snapshot_running_app(status_url, timeout_s=timeout_s)
        if request["state"] != "uploaded":
            raise SnapshotError(
                f"snapshot {request['request_id']} of {settings.application_id} "
                f"{request['state']}: {request['errors']}"
            )
        ids = [row["snapshot_id"] for row in request["snapshots"]]
        return {"running": True, "request_id": request["request_id"], "snapshot_ids": ids}
    results = snapshot_app(settings, topology, storage)
    return {"running": False, "snapshot_ids": [r.manifest.snapshot_id for r in results]}


def _get(url: str, timeout_s: float) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:
        return dict(json.load(resp))
