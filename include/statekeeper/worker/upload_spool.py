"""Snapshot uploads handed from the tasks to the executor's service process, through files.

With ``executor_services_process`` the uploads leave the task's Python worker too (as the
standbys and the query server do): hashing and uploading a checkpoint is CPU and I/O that
would otherwise share the worker's GIL with the batches. The two sides meet in a spool
folder beside the executor's other files (``<state_dir>/<app>/.executor/upload-spool``)::

    incoming/<pid>-<job>/   a task's staged stores being handed over (only that pid's)
    jobs/<ns>-<job>/        a job ready to upload: its stores' folders and job.pkl
    events/<ns>-<job>.json  an upload's outcome, until a task sends it to the driver

- A task (:class:`UploadSpool`) moves its staged folders into ``incoming/``, writes the job
  there and renames the folder into ``jobs/`` (one rename: the uploader sees a whole job or
  none). Staging and spool are on one file system, so nothing is copied. The Spark task
  that spooled a job starts the service process if none runs.
- The service process (:class:`SpoolUploader`) uploads the jobs in name (submission) order,
  manifests last, writes each outcome to ``events/`` and then removes the job. A job
  outlives the processes: one whose uploader was killed is uploaded by the next service
  process (an upload is idempotent: the files are content-addressed and the manifest is
  written last), and one whose task's worker was killed after the hand-over still goes up.
- Any task of the executor sends the events to the driver with its results
  (:meth:`UploadSpool.drain`); it claims each by renaming it first, so no event goes twice.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statekeeper.atomic_file import replace_text
from statekeeper.cluster.executor import executor_dir
from statekeeper.placement.assignment import Assignment
from statekeeper.settings import StatekeeperSettings
from statekeeper.worker.snapshot_uploader import UploadJob, remove_dead_staging, upload_job

log = logging.getLogger("statekeeper.worker.snapshots")

SPOOL_FOLDER = "upload-spool"
JOB_FILE = "job.pkl"

#: Jobs waiting in an executor's spool before new ones are dropped: each holds hard links to
#: its stores' files (RocksDB cannot delete those SSTs meanwhile), so a stalled object store
#: must not let them pile up without bound.
SPOOL_MAX_JOBS = 16

#: How often the uploader looks for new jobs (an upload takes longer than this wait).
POLL_S = 0.5


def spool_dir(state_dir: Path, application_id: str) -> Path:
    """The executor's upload spool for ``application_id``."""
    return executor_dir(state_dir, application_id) / SPOOL_FOLDER


class UploadSpool:
    """The task side: hand staged snapshots to the service process, collect their events."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.incoming = folder / "incoming"
        self.jobs = folder / "jobs"
        self.events = folder / "events"
        for part in (self.incoming, self.jobs, self.events):
            part.mkdir(parents=True, exist_ok=True)
        remove_dead_staging(self.incoming)  # hand-overs a killed worker left half done

    @property
    def pending(self) -> int:
        """Jobs waiting or uploading."""
        return len(self.job_folders())

    def job_folders(self) -> list[Path]:
        """The spooled jobs' folders, oldest first (the uploader's order)."""
        try:
            return sorted(p for p in self.jobs.iterdir() if p.is_dir())
        except FileNotFoundError:
            return []

    def submit(self, job: UploadJob) -> dict[str, Any] | None:
        """Hand ``job`` over; None when it is queued, else its ``failed`` event (the spool
        is full, or the hand-over failed) and its staged copy is removed."""
        if self.pending >= SPOOL_MAX_JOBS:
            job.discard()
            return job.event(
                "failed",
                phase="queue",
                error=f"{SPOOL_MAX_JOBS} snapshots already wait for this executor's uploader "
                "(the service process); this one was dropped",
            )
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}"
        handing = self.incoming / f"{os.getpid()}-{name}"
        try:
            handing.mkdir()
            moved = []
            for index, staged in enumerate(job.staged):
                target = handing / str(index)
                os.rename(staged.staged.directory, target)
                store = dataclasses.replace(staged.staged, directory=self.jobs / name / str(index))
                moved.append(dataclasses.replace(staged, staged=store))
            spooled = dataclasses.replace(job, staged=moved)
            (handing / JOB_FILE).write_bytes(pickle.dumps(spooled))
            os.rename(handing, self.jobs / name)
        except OSError as exc:
            job.discard()
            shutil.rmtree(handing, ignore_errors=True)
            return job.event("failed", phase="queue", error=f"handing over: {exc}")
        return None

    def drain(self) -> list[dict[str, Any]]:
        """The events of uploads finished since any task of this executor last drained."""
        out = []
        try:
            names = sorted(p.name for p in self.events.iterdir() if p.suffix == ".json")
        except FileNotFoundError:
            return out
        for name in names:
            claimed = self.events / f".{name}.{os.getpid()}"
            try:
                os.rename(self.events / name, claimed)  # another task got it first: skip
            except FileNotFoundError:
                continue
            try:
                out.append(json.loads(claimed.read_text()))
            except (OSError, ValueError) as exc:
                log.warning("upload event %s unreadable: %s", name, exc)
            claimed.unlink(missing_ok=True)
        return out


class SpoolUploader:
    """The service-process side: an executor component uploading the spool's jobs on one
    thread, in submission order (see the module docstring)."""

    def __init__(
        self,
        settings: StatekeeperSettings,
        state_dir: Path,
        storage: Callable[[], Any] | None = None,
    ) -> None:
        """``storage`` makes the snapshot storage (default: the settings'); it is called on
        the thread, at the first job, because making it may touch object storage."""
        from statekeeper.snapshots.storage import storage_for

        self.spool = UploadSpool(spool_dir(state_dir, settings.application_id))
        self._storage: Any = None
        self._storage_for = storage or (lambda: storage_for(settings, create=True))
        self._stop = threading.Event()
        self.uploaded = 0
        self.failed = 0
        self._thread = threading.Thread(
            target=self._loop, name="statekeeper-spool-uploader", daemon=True
        )
        self._thread.start()

    def storage(self) -> Any:
        if self._storage is None:
            self._storage = self._storage_for()
        return self._storage

    def _loop(self) -> None:
        while not self._stop.is_set():
            folders = self.spool.job_folders()
            for folder in folders:
                if self._stop.is_set():
                    return
                try:
                    self._upload(folder)
                except Exception:  # one broken job must not stop the others
                    log.exception("spooled upload %s failed", folder.name)
                    shutil.rmtree(folder, ignore_errors=True)
            if not folders:
                self._stop.wait(POLL_S)

    def _upload(self, folder: Path) -> None:
        job: UploadJob = pickle.loads((folder / JOB_FILE).read_bytes())  # noqa: S301 - ours
        event = upload_job(job, self.storage)
        if event["event"] == "uploaded":
            self.uploaded += 1
        else:
            self.failed += 1
        # The event first, then the job: a kill before the event uploads the job again
        # (idempotent). One after upload_job removed the staged copy but before the event
        # leaves a job the next uploader reports as failed, though its manifest is written.
        replace_text(self.spool.events / f"{folder.name}.json", json.dumps(event))
        shutil.rmtree(folder, ignore_errors=True)

    def reconcile(self, assignment: Assignment) -> None:
        """Uploads do not depend on the assignment."""

    def report(self) -> dict[str, Any]:
        return {"pending": self.spool.pending, "uploaded": self.uploaded, "failed": self.failed}

    def close(self) -> None:
        """Stop after the job being uploaded; the rest stay spooled for the next process."""
        self._stop.set()
        self._thread.join(timeout=30)
