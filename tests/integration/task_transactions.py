"""Tasks with three logged stores on the real broker, a batch model to check them against, and
crash points inside a commit: shared by the transaction tests, in process and in a killed
subprocess (``python -m tests.integration.task_transactions``, run from the repo root).

Crash points, in commit order: after each step (the transaction's step hooks, named after its
states) and inside two steps: ``mid-markers`` (the first marker written, then a crash) and
``mid-stores`` (the first store written, then a crash).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from statekeeper.settings import load_settings
from statekeeper.state.environment import StateEnvironment
from statekeeper.state.task_state_manager import TaskStateManager
from statekeeper.state.transaction import COMMIT_STEPS
from statekeeper.stores import Stores

REPO_ROOT = Path(__file__).resolve().parents[2]

#: Two persistent stores (one with a record cache, so the flush step matters) and an
#: in-memory one; every one logged.
SPECS = [
    Stores.persistent("kv").with_serdes("str", "int").with_caching_enabled(1 << 20),
    Stores.persistent("totals").with_serdes("str", "int"),
    Stores.in_memory("mem").with_serdes("str", "int"),
]
STORES = tuple(spec.name for spec in SPECS)
PARTITIONS = 3

#: Every crash point, in commit order; "rolls forward" from mid-markers on.
CRASH_POINTS = (
    "flushed",
    "produced",
    "mid-markers",
    "marked",
    "mid-stores",
    "stored",
    "committed",
)
ROLLS_FORWARD = frozenset(CRASH_POINTS[CRASH_POINTS.index("mid-markers") :])
assert {str(s) for s in COMMIT_STEPS} <= set(CRASH_POINTS)


class Crash(RuntimeError):
    """Raised at an in-process crash point."""


def environment(bootstrap: str, state_dir: Path, app: str) -> StateEnvironment:
    """A process's state services for ``app``, its changelogs created."""
    settings = load_settings(bootstrap_servers=bootstrap, state_dir=state_dir, application_id=app)
    env = StateEnvironment(settings)
    env.ensure_changelogs(SPECS, PARTITIONS)
    return env


def open_tasks(env: StateEnvironment, partitions: range | list[int]) -> list[TaskStateManager]:
    tasks = []
    for p in partitions:
        task = env.task(f"0_{p}", p, SPECS)
        task.open()
        tasks.append(task)
    return tasks


def source_offsets(partition: int, batch: int) -> dict[str, int]:
    return {f"in:{partition}": 10 * (batch + 1)}


def write_batch(task: TaskStateManager, batch: int) -> None:
    """What batch ``batch`` writes: overwrites, one new key, one delete."""
    for name in STORES:
        store = task.store(name)
        for key, value in _batch_ops(task.partition, batch):
            if value is None:
                store.delete(key)
            else:
                store.put(key, value)


def _batch_ops(partition: int, batch: int) -> list[tuple[str, int | None]]:
    ops: list[tuple[str, int | None]] = [(f"k{partition}-{i}", batch * 100 + i) for i in range(30)]
    ops.append((f"new{partition}-{batch}", batch))
    ops.append((f"k{partition}-{batch % 30}", None))
    return ops


def expected(partition: int, last_batch: int | None) -> dict[str, dict[str, int]]:
    """Every store's contents after batches ``0..last_batch`` committed."""
    model: dict[str, int] = {}
    for batch in range(-1 if last_batch is None else last_batch + 1):
        for key, value in _batch_ops(partition, batch):
            if value is None:
                model.pop(key, None)
            else:
                model[key] = value
    return {name: dict(model) for name in STORES}


def contents(task: TaskStateManager) -> dict[str, dict[str, int]]:
    return {name: dict(task.store(name).all()) for name in STORES}


def install_crash(
    env: StateEnvironment, tasks: list[TaskStateManager], point: str, crash: Any
) -> None:
    """Call ``crash()`` at ``point`` of the next commit of ``tasks`` (see module docstring)."""
    if point == "mid-markers":
        write_markers = env.writer.write_markers

        def first_marker_only(markers: list[Any], timeout_s: float) -> Any:
            write_markers(markers[:1], timeout_s)
            crash()

        env.writer.write_markers = first_marker_only  # type: ignore[method-assign]
    elif point == "mid-stores":
        second = tasks[0].store(STORES[1])  # the first store is written, then this one fails

        def crash_on_commit(metadata: Any) -> None:
            crash()

        second.commit = crash_on_commit  # type: ignore[method-assign]
    else:

        def hook(step: str, batch_id: int) -> None:
            if step == point:
                crash()

        for task in tasks:
            task.commit_hooks.append(hook)


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def run_killed(bootstrap: str, state_dir: Path, app: str, point: str) -> None:
    """In a subprocess: commit batch 0 of task 0_0, then die by SIGKILL at ``point`` while
    committing batch 1."""
    cmd = [
        sys.executable, "-m", "tests.integration.task_transactions",
        "--bootstrap", bootstrap, "--state-dir", str(state_dir), "--app", app,
        "--crash-at", point,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert proc.returncode == -signal.SIGKILL, (
        f"expected SIGKILL at {point}, got {proc.returncode}: {proc.stderr[-3000:]}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="commit, then die at a crash point")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--app", required=True)
    parser.add_argument("--crash-at", choices=CRASH_POINTS, required=True)
    args = parser.parse_args(argv)
    env = environment(args.bootstrap, args.state_dir, args.app)
    (task,) = open_tasks(env, [0])
    write_batch(task, 0)
    task.commit(0, source_offsets(0, 0))
    install_crash(env, [task], args.crash_at, kill_self)
    write_batch(task, 1)
    task.commit(1, source_offsets(0, 1))
    return 1  # not reached: the crash point kills the process


if __name__ == "__main__":
    raise SystemExit(main())
