"""Snapshot every task of a stopped app from its local state (``statekeeper snapshot create``).

Each task directory found under ``<state_dir>/<app>/`` is opened through the
:class:`StateEnvironment` (which takes the task lock and replays any changelog tail, so the
task sits at its last commit) and snapshotted store by store. A running app holds the task
locks, so this waits for them and then fails naming the holder; in-app snapshots come from
the after-commit hook instead.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from statekeeper.settings import StatekeeperSettings
from statekeeper.snapshots.create import SnapshotResult, snapshot_task
from statekeeper.snapshots.manifest import SnapshotError
from statekeeper.snapshots.storage import SnapshotStorage
from statekeeper.state.environment import StateEnvironment

_TASK_DIR = re.compile(r"^(\d+)_(\d+)$")


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
        match = _TASK_DIR.match(entry.name)
        if entry.is_dir() and match and int(match[1]) in stateful:
            found.append((entry.name, int(match[1]), int(match[2])))
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
    env = StateEnvironment(settings)
    results: list[SnapshotResult] = []
    try:
        for task_id, sub, partition in found:
            specs = topology.store_specs(sub)
            names = [s.name for s in specs if stores is None or s.name in stores]
            if not names:
                continue
            with env.task(task_id, partition, specs) as task:
                results.extend(snapshot_task(task, storage, staging, stores=names))
    finally:
        env.close()
    return results
