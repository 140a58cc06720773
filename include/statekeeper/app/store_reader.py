"""Read an app's stores offline (app stopped): every task's copy of a store, restored and
merged. Used by tests, the demo and ``statekeeper stores`` to compare state with a
recomputation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from statekeeper.errors import StatekeeperError
from statekeeper.processing.topology import task_id
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.environment import StateEnvironment
from statekeeper.stores.typed import WindowStore


def _tasks_of(topology: Any, store: str, partitions: int) -> Iterator[tuple[str, int, int]]:
    for sub in topology.subtopologies:
        if any(spec.name == store for spec in topology.store_specs(sub.id)):
            for p in range(partitions):
                yield task_id(sub.id, p), sub.id, p
            return
    raise StatekeeperError(f"topology has no store {store!r}")


def read_store(
    settings: StatekeeperSettings, topology: Any, store: str, partitions: int
) -> dict[Any, Any]:
    """All entries of ``store`` across its tasks: ``{key: value}`` for key-value stores,
    ``{(key, window_start): value}`` for window stores. Opens (and restores) each task
    read-only: a read never writes to a changelog (no revert, no marker), so reading a
    stopped app's state leaves its changelogs as they were."""
    env = StateEnvironment(settings, read_only=True)
    merged: dict[Any, Any] = {}
    try:
        for task_id, sub, partition in _tasks_of(topology, store, partitions):
            with env.task(task_id, partition, topology.store_specs(sub)) as task:
                typed = task.store(store)
                if isinstance(typed, WindowStore):
                    for key, start, value in typed.all():
                        merged[(key, start)] = value
                else:
                    merged.update(typed.all())
    finally:
        env.close()
    return merged
