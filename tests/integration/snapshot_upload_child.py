"""A process that snapshots a task and is killed with SIGKILL in the middle of its upload.

It commits a task's stores, stages them through the worker's :class:`TaskSnapshots` (the
running app's path) and lets the background uploader upload through a deliberately slow
storage: the first file goes through, every later one blocks (on ``file://`` after it was
written to ``staging/``, before it is moved into ``shared/``; on S3 before it is put). It
prints ``UPLOADING`` when the upload is stuck there; the test then kills it. With
``--spool`` the task hands its copy to the executor's upload spool, and this process then
uploads it as the service process would (:class:`SpoolUploader`).

Run from the repository root:
``python -m tests.integration.snapshot_upload_child --bootstrap H:P --state-dir D --app A
--url URL [--options JSON] [--spool]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import threading
import time
from typing import Any

from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotStorage
from statekeeper.state.environment import StateEnvironment
from statekeeper.worker.task_snapshots import TaskSnapshots
from statekeeper.worker.upload_spool import SpoolUploader

from .test_snapshots import SPECS, _fill


def _stall_after_first(storage: SnapshotStorage) -> None:
    """Let one file through, then block every later one (the process gets killed)."""
    method = "mv" if storage.local else "put_file"
    original = getattr(storage.fs, method)
    calls = itertools.count()

    first_done = threading.Event()

    def slow(*args: Any, **kwargs: Any) -> Any:
        if next(calls) >= 1:
            first_done.wait()
            print("UPLOADING", flush=True)
            time.sleep(3600)
        try:
            return original(*args, **kwargs)
        finally:
            first_done.set()

    setattr(storage.fs, method, slow)


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--state-dir", "--app", "--url"):
        parser.add_argument(name, required=True)
    parser.add_argument("--options", default="{}")
    parser.add_argument("--spool", action="store_true")
    args = parser.parse_args()
    settings = load_settings(
        bootstrap_servers=args.bootstrap,
        state_dir=args.state_dir,
        application_id=args.app,
        snapshot_url=args.url,
        executor_services_process=args.spool,
    )
    env = StateEnvironment(settings)
    env.ensure_changelogs(SPECS, 1)
    task = env.task("0_0", 0, SPECS)
    task.open()
    _fill(task, random.Random(5), list(range(20_000)), batch=0)
    storage = SnapshotStorage(args.url, args.app, **json.loads(args.options))
    _stall_after_first(storage)
    snapshots = TaskSnapshots(settings)
    snapshots._storage = storage
    snapshots.arm("0_0", "kill9")
    events = snapshots.finish(task)  # stages and hands the copy to the uploader
    print(json.dumps(events), flush=True)
    if args.spool:
        SpoolUploader(settings, settings.state_dir, storage=lambda: storage)
    time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
