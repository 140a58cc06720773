"""The driver's assignment as an executor host holds it: every batch's Spark tasks publish
it there, and a task left open in a worker asks it whether the task is still placed here
under the epoch it was opened with (a copy that is not is stale: never committed)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from statekeeper.atomic_file import replace_text
from statekeeper.cluster.executor import executor_dir
from statekeeper.placement.assignment import Assignment

_FILE = "assignment.json"


def publish_assignment(state_dir: Path, assignment: Assignment) -> None:
    """Hand the driver's assignment to this executor's host (atomic replace; a newer
    version of the same app run on disk is kept, a previous run's is replaced)."""
    folder = executor_dir(state_dir, assignment.application_id)
    folder.mkdir(parents=True, exist_ok=True)
    current = read_assignment(state_dir, assignment.application_id)
    if (
        current is not None
        and current.run_id == assignment.run_id
        and current.version > assignment.version
    ):
        return
    replace_text(folder / _FILE, assignment.to_json())


def read_assignment(state_dir: Path, application_id: str) -> Assignment | None:
    """The assignment published on this host (None before the first, or unreadable)."""
    try:
        text = (executor_dir(state_dir, application_id) / _FILE).read_text()
    except OSError:
        return None
    try:
        return Assignment.from_json(text)
    except (ValueError, KeyError, TypeError):
        return None


def still_placed_here(
    state_dir: Path, app_id: str, task_id: str, me: str, epoch: int
) -> Callable[[], bool]:
    """A check: whether the latest assignment published here still places ``task_id`` on
    executor ``me`` under ``epoch``; True where no assignment is published."""

    def check() -> bool:
        assignment = read_assignment(state_dir, app_id)
        if assignment is None or task_id not in assignment.tasks:
            return True
        return assignment.active_of(task_id) in (None, me) and assignment.epoch_of(task_id) == epoch

    return check
