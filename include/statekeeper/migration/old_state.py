"""The old version's committed state of one task, read without touching anything live.

The task is rebuilt in a scratch state directory of its own: each logged persistent store
from the newest verified snapshot (:func:`statekeeper.snapshots.install.installer_for`), then
the changelog tail after the snapshot's marker, or from the whole changelog when no snapshot
fits; in-memory stores from their changelog. The task is opened read-only
(:class:`~statekeeper.state.task_state_manager.TaskStateManager` with ``read_only``): every
store stops at its last commit marker, nothing is reverted, rolled forward or logged, and no
producer exists. The app's own task directories are never opened, locked or listed, so the
old version may still be running (its last commit is what is read).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from statekeeper.settings import StatekeeperSettings
from statekeeper.snapshots.install import installer_for
from statekeeper.snapshots.storage import SnapshotStorage, storage_for
from statekeeper.state.environment import StateEnvironment
from statekeeper.state.task_state_manager import TaskStateManager
from statekeeper.stores.builders import StoreSpec

#: Opens the old app's snapshot storage (called at the first install; a failure, or no
#: snapshot root at all, means a full changelog replay).
StorageOpener = Callable[[], SnapshotStorage]


def scratch_settings(settings: StatekeeperSettings, scratch: Path) -> StatekeeperSettings:
    """The old app's settings with its state directory moved to ``scratch``."""
    return settings.model_copy(update={"state_dir": Path(scratch)})


@contextmanager
def old_task_state(
    settings: StatekeeperSettings,
    task_id: str,
    partition: int,
    specs: list[StoreSpec],
    *,
    storage: StorageOpener | None = None,
    scratch_root: Path | None = None,
) -> Iterator[TaskStateManager]:
    """``with old_task_state(...) as task:`` the old app's task ``task_id`` opened read-only
    at its last commit (module docstring), in a scratch directory (under ``scratch_root``,
    default the temporary directory) removed afterwards. ``storage``: where its snapshots
    are (default: the old app's snapshot storage; None found means a full replay)."""
    if scratch_root is not None:
        Path(scratch_root).mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"statekeeper-migrate-{task_id}-", dir=scratch_root))
    try:
        local = scratch_settings(settings, scratch)
        env = StateEnvironment(local, read_only=True, check_broker=False)
        opener = storage or _default_storage(settings)
        installer = installer_for(local, opener, task_id, partition, replay_on_storage_error=True)
        task = env.task(task_id, partition, specs, installer=installer)
        try:
            task.open()
            try:
                yield task
            finally:
                task.close()
        finally:
            env.close()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _default_storage(settings: StatekeeperSettings) -> StorageOpener:
    def open_storage() -> SnapshotStorage:
        return storage_for(settings, create=False)

    return open_storage


def committed_batch(task: Any) -> tuple[int | None, dict[str, int], list[str]]:
    """The batch id and source offsets the old task's stores agree on, and the stores whose
    last marker says otherwise (a commit cut short between markers: its next open by the
    old version settles it)."""
    marked = {
        slot.spec.name: slot.store.read_metadata() for slot in task.slots if slot.topic is not None
    }
    if not marked:
        return None, {}, []
    newest = max(marked.values(), key=lambda m: -1 if m.batch_id is None else m.batch_id)
    behind = sorted(
        name
        for name, meta in marked.items()
        if (meta.batch_id, meta.source_offsets) != (newest.batch_id, newest.source_offsets)
    )
    return newest.batch_id, dict(newest.source_offsets), behind
