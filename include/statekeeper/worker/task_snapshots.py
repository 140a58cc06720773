"""Snapshots and snapshot restores of the tasks one worker process runs.

Taking (docs/runtime.md, snapshots section): the driver marks a batch's task runs with a snapshot
request; the runner :meth:`arms <TaskSnapshots.arm>` each such task before committing it.
The task's after-commit hook (registered once per open task, :meth:`watch`) then stages its
stores right after the ``COMMITTED`` transaction — only the RocksDB checkpoints / in-memory
dumps, which is the processing pause — and hands them to this process's
:class:`~statekeeper.worker.snapshot_uploader.SnapshotUploader`, or, with
``executor_services_process``, to the executor's service process through its
:mod:`~statekeeper.worker.upload_spool`. A task the batch did not
need to commit (nothing processed since its last commit) is already at a commit boundary
and is staged by :meth:`finish` instead. Staging happens only at a commit, so snapshots do
not touch exactly-once; a staging or upload failure is reported, never raised.

Restoring (invariant 4): :meth:`installer` gives the task open path a
:data:`~statekeeper.state.task_state_manager.StoreInstaller` that puts the newest verified
snapshot of a missing store in place, when restores from snapshots are on
(:func:`restores_from_snapshots`). Per store it falls back to the previous snapshot (an
unreadable manifest, a missing or damaged file), then to a full changelog replay (none left,
or the storage fails), and says which and why to the restore listeners and in the status
(:func:`restore_source`); opening a task never fails because of its snapshots.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

from statekeeper.settings import StatekeeperSettings
from statekeeper.worker.snapshot_uploader import (
    SnapshotUploader,
    UploadJob,
    remove_dead_staging,
)
from statekeeper.worker.upload_spool import UploadSpool, spool_dir

log = logging.getLogger("statekeeper.worker.snapshots")

STAGING_FOLDER = ".snapshot-staging"


def restores_from_snapshots(settings: StatekeeperSettings) -> bool:
    """Whether a missing store is restored from a snapshot (else the whole changelog):
    ``restore_from_snapshots`` true, or unset with ``snapshot_url`` set or the default
    snapshot folder holding this app's snapshots."""
    from statekeeper.snapshots.storage import snapshot_url_for

    enabled = settings.restore_from_snapshots
    if enabled is not None:
        return enabled
    if settings.snapshot_url:
        return True
    default = Path(snapshot_url_for(settings).removeprefix("file://"))
    return (default / settings.application_id / "manifests").is_dir()


class TaskSnapshots:
    """Per worker process: armed snapshot requests, staging, the uploader, the installer."""

    def __init__(self, settings: StatekeeperSettings, listener: Any | None = None) -> None:
        """``listener``: a restore listener told which snapshot each installed store came
        from (``on_restore_reason``)."""
        self.settings = settings
        self.listener = listener
        root = Path(settings.state_dir) / STAGING_FOLDER
        remove_dead_staging(root)  # left by killed workers of this state directory
        self.staging_dir = root / f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._storage: Any | None = None
        self.uploader = SnapshotUploader(self.storage)
        #: With ``executor_services_process`` the executor's service process uploads.
        self.spool: UploadSpool | None = None
        if settings.executor_services_process:
            self.spool = UploadSpool(spool_dir(Path(settings.state_dir), settings.application_id))
        self._armed: dict[str, str] = {}  # task id -> request id
        #: task id -> the topology fingerprint (JSON) its armed snapshot's manifests record
        self._topologies: dict[str, str | None] = {}
        self._events: dict[str, list[dict[str, Any]]] = {}  # task id -> staging events

    def storage(self) -> Any:
        if self._storage is None:
            from statekeeper.snapshots.storage import storage_for

            self._storage = storage_for(self.settings, create=True)
        return self._storage

    # -- taking --------------------------------------------------------------------------------

    def watch(self, state: Any) -> None:
        """Register the after-commit hook of a newly opened task."""
        state.add_after_commit_hook(lambda committed: self._after_commit(state, committed))

    def arm(self, task_id: str, request_id: str, topology: str | None = None) -> None:
        """Snapshot ``task_id`` right after its next commit (or in :meth:`finish`);
        ``topology``: the app's topology fingerprint (JSON) for its manifests."""
        self._armed[task_id] = request_id
        self._topologies[task_id] = topology

    def disarm(self, task_id: str) -> None:
        self._take(task_id)

    def _take(self, task_id: str) -> tuple[str | None, str | None]:
        """The armed request of ``task_id`` (None: not armed) and its topology, disarmed."""
        return self._armed.pop(task_id, None), self._topologies.pop(task_id, None)

    def _after_commit(self, state: Any, committed: Any) -> None:
        request, topology = self._take(state.task_id)
        if request is not None:
            self._stage(state, request, committed, topology)

    def finish(self, state: Any) -> list[dict[str, Any]]:
        """After the batch's commits: stage a task still armed (it had nothing to commit, so
        it sits at its last commit); returns the task's staging events."""
        request, topology = self._take(state.task_id)
        if request is not None:
            if state.last_batch_id is None:
                self._event(
                    state.task_id,
                    {
                        "event": "skipped",
                        "request_id": request,
                        "task": state.task_id,
                        "reason": "the task has not committed any batch yet",
                    },
                )
            elif state.has_uncommitted:
                self._event(
                    state.task_id,
                    {
                        "event": "failed",
                        "request_id": request,
                        "task": state.task_id,
                        "phase": "stage",
                        "error": "the task holds uncommitted batches",
                    },
                )
            else:
                self._stage(state, request, None, topology)
        return self._events.pop(state.task_id, [])

    def _stage(self, state: Any, request: str, committed: Any | None, topology: str | None) -> None:
        from statekeeper.snapshots.create import stage_task

        started = time.perf_counter()
        batch_id = committed.batch_id if committed is not None else state.last_batch_id
        try:
            staged = stage_task(
                state,
                self.staging_dir,
                committed,
                describe=False,
                topology=json.loads(topology) if topology is not None else None,
            )
        except Exception as exc:  # reported; the commit stands
            log.warning("task %s: staging a snapshot failed: %s", state.task_id, exc)
            self._event(
                state.task_id,
                {
                    "event": "failed",
                    "request_id": request,
                    "task": state.task_id,
                    "batch_id": batch_id,
                    "phase": "stage",
                    "error": f"{type(exc).__name__}: {exc}",
                },
            )
            return
        job = UploadJob(
            request_id=request,
            task_id=state.task_id,
            batch_id=batch_id,
            staged=staged,
            pause_ms=sum(s.staged.pause_s for s in staged) * 1000,
            stage_ms=(time.perf_counter() - started) * 1000,
            snapshot_ids={s.manifest.store: s.manifest.snapshot_id for s in staged},
        )
        self._event(state.task_id, job.event("staged"))
        if self.spool is None:
            self.uploader.submit(job)
        elif (refused := self.spool.submit(job)) is not None:
            self._event(state.task_id, refused)

    def _event(self, task_id: str, event: dict[str, Any]) -> None:
        self._events.setdefault(task_id, []).append(event)

    @property
    def uploads_spooled(self) -> bool:
        """Whether snapshots wait in the executor's upload spool (for its service process)."""
        return self.spool is not None and self.spool.pending > 0

    def drain_uploads(self) -> list[dict[str, Any]]:
        """Upload events (any task's) finished since the last call."""
        return self.uploader.drain() if self.spool is None else self.spool.drain()

    # -- restoring -----------------------------------------------------------------------------

    def installer(self, task_id: str, partition: int) -> Any | None:
        """The store installer for opening ``task_id``, or None when restores from
        snapshots are off (see :func:`restores_from_snapshots`). It never fails the open:
        unreadable manifests and damaged snapshots fall back to older ones, a failing
        storage to a full changelog replay; the listener hears which, and why."""
        from statekeeper.changelog.records import changelog_topic
        from statekeeper.snapshots.install import describe_install, installer_for

        if not restores_from_snapshots(self.settings):
            return None
        install = installer_for(
            self.settings, self.storage, task_id, partition, replay_on_storage_error=True
        )

        def install_and_tell(spec: Any, path: Path) -> Any:
            report = install(spec, path)
            why = describe_install(report)
            if self.listener is not None:  # the environment's listeners log it too
                tp = (changelog_topic(self.settings.application_id, spec.name), partition)
                self.listener.on_restore_reason(tp, spec.name, why)
            elif report.source != "snapshot" or report.fallbacks:
                log.warning("task %s store %s: %s", task_id, spec.name, why)
            return report

        return install_and_tell

    def close(self, timeout_s: float = 30.0) -> None:
        """Finish queued uploads (bounded), stop the uploader, remove local staging."""
        self.uploader.close(timeout_s)
        shutil.rmtree(self.staging_dir, ignore_errors=True)


def restore_source(outcome: Any, spec: Any | None, install: dict[str, Any] | None) -> dict:
    """Where a store opened by a task got its state: ``source`` is ``snapshot`` (with its
    ``snapshot_id``; ``records`` is the changelog tail replayed after it), ``full replay``
    (the whole changelog: no local state, or corrupt), ``new`` (a first start: nothing was
    ever committed, so there was nothing to replay), ``changelog (in-memory store)``, or
    ``local state`` (only the tail after the local checkpoint)."""
    out: dict[str, Any] = {}
    if install is not None and install.get("source") == "snapshot" and not outcome.full:
        out["source"] = "snapshot"
        out["snapshot_id"] = install.get("snapshot_id")
        out["snapshot_batch_id"] = install.get("batch_id")
        out["bytes_downloaded"] = install.get("bytes_downloaded")
    elif outcome.last_marker is None and outcome.restored_records == 0:
        out["source"] = "new"
    elif spec is not None and not spec.persistent:
        out["source"] = "changelog (in-memory store)"
    elif outcome.full:
        out["source"] = "full replay"
    else:
        out["source"] = "local state"
    if install is not None and install.get("fallbacks"):
        out["snapshot_fallbacks"] = install["fallbacks"]
    new = out["source"] == "new"  # "no snapshot of task …" is no news on a first start
    if (
        not new
        and install is not None
        and install.get("source") != "snapshot"
        and install.get("note")
    ):
        out["snapshot_note"] = install["note"]
    return out
