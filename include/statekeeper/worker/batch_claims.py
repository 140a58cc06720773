"""Which worker runs a task in one execution of a micro-batch.

Every Spark task of a batch gets the whole run list (see :func:`task_runner.run_share`).
A worker that holds a task parked claims it for the batch's job id at once; the worker whose
share holds the task then sees the claim and leaves it alone. A claim is only written by the
task lock's holder, so a claimed task is run by exactly that holder. Job ids are fresh for
every execution of a batch, so a claim never outlives a failed attempt.
"""

from __future__ import annotations

from pathlib import Path

from statekeeper.atomic_file import replace_text

CLAIM_FILE = ".claim"


def claim(task_dir: Path, job: str) -> None:
    """Mark ``task_dir``'s task as run in ``job`` (call with the task lock held)."""
    replace_text(task_dir / CLAIM_FILE, job)  # readers never see a partial id


def is_claimed(task_dir: Path, job: str) -> bool:
    try:
        return (task_dir / CLAIM_FILE).read_text() == job
    except OSError:
        return False
