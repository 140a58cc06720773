"""How a batch's runs split into Spark tasks: the driver deals each executor's runs into
shares (:func:`spread_runs`); on the executors, each Spark task takes one share placed on
its own executor that no other Spark task of the pass took (:func:`take_share`). Spark does
not pin Spark tasks to executors, so a share nobody took runs in the driver's next pass."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from statekeeper.cluster.executor import executor_dir


class _Range(Protocol):
    count: int


class ShareableRun(Protocol):
    """What dealing reads of a run: its task, its executor and its offset ranges."""

    task_id: str
    executor: str | None

    @property
    def ranges(self) -> Sequence[_Range]: ...


Run = TypeVar("Run", bound=ShareableRun)

#: Share files of passes older than this are removed (a pass lasts one pass over a batch).
_JOB_FILES_KEEP_S = 600.0


def spread_runs(runs: list[Run], slots: int) -> list[list[Run]]:
    """Deal ``runs`` into at most ``slots`` shares of about equal record counts (largest
    first, each to the least loaded share). One Spark task per share: every Spark task
    costs a Python-worker round trip (~50 ms measured), so a batch uses one per core, not
    one per stream task."""
    groups: list[list[Run]] = [[] for _ in range(max(1, min(slots, len(runs))))]
    loads = [0] * len(groups)
    for run in sorted(runs, key=lambda r: (-sum(x.count for x in r.ranges), r.task_id)):
        least = loads.index(min(loads))
        groups[least].append(run)
        loads[least] += sum(x.count for x in run.ranges)
    return [g for g in groups if g]


def take_share(
    index: int, shares: list[list[Run]], job: str, me: str, state_dir: Path, app_id: str
) -> list[Run]:
    """The share Spark task ``index`` of pass ``job`` runs on executor ``me``: share
    ``index`` if it is placed here, else the first one placed here that no other Spark task
    of the pass took (an exclusive create in the executor's own folder decides)."""
    mine = [k for k, share in enumerate(shares) if share and share[0].executor in (None, me)]
    if not mine:
        return []
    order = ([index] if index in mine else []) + [k for k in mine if k != index]
    jobs = executor_dir(state_dir, app_id) / "jobs"
    folder = jobs / job
    folder.mkdir(parents=True, exist_ok=True)
    _forget_old_jobs(jobs, keep=job)
    for k in order:
        try:
            os.close(os.open(folder / str(k), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        except FileExistsError:
            continue
        return shares[k]
    return []


def _forget_old_jobs(jobs: Path, keep: str) -> None:
    now = time.time()
    try:
        entries = list(os.scandir(jobs))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.name != keep and now - entry.stat().st_mtime > _JOB_FILES_KEEP_S:
                shutil.rmtree(entry.path, ignore_errors=True)
        except OSError:
            continue
