"""Restore a stopped app's stores from a snapshot plus the changelog tail (``statekeeper restore``).

For each selected task and store, :func:`statekeeper.snapshots.install.install_store` puts
the best verified snapshot in place (``latest``, a snapshot id, or ``none`` = full changelog
replay, with every fallback reported); opening the task once afterwards through the
:class:`StateEnvironment` replays only the changelog tail after the snapshot's marker and
leaves the task at its last commit. In-memory and LRU stores are not installed: they always
restore fully from their changelog on open. ``state_dir`` may point elsewhere than the app's
(``restore --to DIR``): the restore then builds a copy and leaves the app's own state alone:
the live task directories are only listed (which tasks exist), never opened, locked or
written, and a ``DIR`` inside the app's own state directory is refused.

The app must be stopped: a task whose lock another process holds is refused, naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statekeeper.errors import TaskLockedError
from statekeeper.settings import StatekeeperSettings, close_names
from statekeeper.snapshots.catalog import list_snapshots
from statekeeper.snapshots.install import (
    LATEST,
    NONE,
    Progress,
    RestoreError,
    StoreRestore,
    install_store,
)
from statekeeper.snapshots.storage import SnapshotStorage
from statekeeper.state.directory import TaskDirectory, TaskLock
from statekeeper.state.environment import StateEnvironment
from statekeeper.state.task_id import TaskId

__all__ = ["LATEST", "NONE", "RestoreError", "StoreRestore", "restore_app", "restore_task"]


def parse_task_id(task_id: str) -> tuple[int, int]:
    """``(subtopology, partition)`` of a task id ``<sub>_<partition>`` (a
    :class:`RestoreError` when it is not one)."""
    try:
        tid = TaskId.parse(task_id)
    except ValueError as exc:
        raise RestoreError(str(exc)) from None
    return tid.subtopology, tid.partition


def check_selection(
    topology: Any, tasks: list[str] | None = None, stores: list[str] | None = None
) -> None:
    """Refuse ``tasks`` and ``stores`` the topology does not have, before anything reads
    the broker or the state: a task ``<subtopology>_<partition>`` of a stateful
    subtopology, a store of those tasks (of any task when no task is named)."""
    stateful = {s.id: topology.store_specs(s.id) for s in topology.subtopologies}
    stateful = {sub: specs for sub, specs in stateful.items() if specs}
    subs = set(stateful)
    for task_id in tasks or []:
        sub, _ = parse_task_id(task_id)
        if sub not in stateful:
            known = ", ".join(f"{s}_<partition>" for s in sorted(stateful)) or "none"
            raise RestoreError(
                f"--task {task_id}: the topology has no stateful subtopology {sub} (its "
                f"tasks with stores: {known})"
            )
    if tasks:
        subs = {parse_task_id(t)[0] for t in tasks}
    names = sorted({spec.name for sub in subs for spec in stateful[sub]})
    for store in stores or []:
        if store not in names:
            of = f"tasks {', '.join(tasks)}" if tasks else "the topology"
            raise RestoreError(
                f"--store {store}: no such store in {of}{close_names(store, names)}; "
                f"stores: {', '.join(names) or 'none'}"
            )


def ensure_stopped(settings: StatekeeperSettings, task_id: str) -> None:
    """Refuse a task whose lock another process holds (the app is running)."""
    directory = TaskDirectory(settings.state_dir, settings.application_id, task_id)
    if TaskLock(directory, 0).held_elsewhere():
        try:
            holder = directory.lock_file.read_text().strip() or "unknown"
        except OSError:
            holder = "unknown"
        raise TaskLockedError(
            f"task {task_id} of {settings.application_id} is locked by PID {holder} "
            f"({directory.lock_file}): the app is running; stop it before restoring"
        )


def restore_task(
    env: StateEnvironment,
    storage: SnapshotStorage | None,
    task_id: str,
    specs: list[Any],
    *,
    stores: list[str] | None = None,
    from_snapshot: str = LATEST,
    progress: Progress | None = None,
) -> list[StoreRestore]:
    """Install snapshots of the task's selected stores, then open and close the task once
    so the changelog tail is replayed and committed; one report per selected store."""
    settings = env.settings
    _, partition = parse_task_id(task_id)
    ensure_stopped(settings, task_id)
    names = {s.name for s in specs}
    unknown = sorted(set(stores or []) - names)
    if unknown:
        raise RestoreError(f"task {task_id} has no store {unknown}; stores: {sorted(names)}")
    selected = [s for s in specs if stores is None or s.name in stores]
    reports: dict[str, StoreRestore] = {}
    directory = TaskDirectory(settings.state_dir, settings.application_id, task_id)
    # Hold the lock while files move so a starting app cannot open half-installed state.
    with TaskLock(directory, 0):
        for spec in selected:
            if not spec.logging_enabled:
                reports[spec.name] = StoreRestore(
                    task_id, spec.name, "none", note="logging disabled: nothing to restore"
                )
            elif not spec.persistent:
                reports[spec.name] = StoreRestore(
                    task_id,
                    spec.name,
                    "changelog (in-memory store)",
                    note="in-memory/LRU stores always restore fully from their changelog",
                )
            else:
                reports[spec.name] = install_store(
                    settings,
                    storage,
                    task_id,
                    partition,
                    spec.name,
                    from_snapshot,
                    progress,
                    spec=spec,
                )
    task = env.task(task_id, partition, specs)
    outcomes = task.open()
    task.close()
    for outcome in outcomes:
        report = reports.get(outcome.job.store.name)
        if report is None:
            continue
        report.records_replayed = outcome.restored_records
        report.seconds += outcome.seconds
        report.marker_offset = outcome.marker_offset
        report.batch_id = None if outcome.last_marker is None else outcome.last_marker.batch_id
        if report.source == "snapshot" and outcome.full:
            # The restorer found the snapshot's marker inconsistent with the changelog.
            report.fallbacks.append(
                {"snapshot_id": report.snapshot_id or "", "reason": outcome.job.reason or "?"}
            )
            report.source, report.snapshot_id = "full replay", None
    return list(reports.values())


def restore_tasks(topology: Any, settings: StatekeeperSettings, storage: Any) -> list[str]:
    """Tasks to restore: stateful tasks with a local directory or with a snapshot."""
    stateful = {sub.id for sub in topology.subtopologies if topology.store_specs(sub.id)}
    found: set[str] = set()
    app_dir = Path(settings.state_dir) / settings.application_id
    if app_dir.is_dir():
        found |= {
            p.name for p in app_dir.iterdir() if p.is_dir() and TaskId.try_parse(p.name) is not None
        }
    if storage is not None:
        found |= {m.task for m in list_snapshots(storage)}
    return sorted((t for t in found if parse_task_id(t)[0] in stateful), key=parse_task_id)


def restore_app(
    settings: StatekeeperSettings,
    topology: Any,
    storage: SnapshotStorage | None,
    *,
    tasks: list[str] | None = None,
    stores: list[str] | None = None,
    from_snapshot: str = LATEST,
    progress: Progress | None = None,
    to: Path | None = None,
) -> list[StoreRestore]:
    """Restore the selected tasks (default: every task with local state or a snapshot;
    with a snapshot id, that snapshot's task and store).

    ``to``: build the copy under this state root instead, read-only against the changelogs
    (each store at its last commit marker; nothing is reverted or re-logged), so it may run
    while the app does and never touches the app's own state."""
    check_selection(topology, tasks, stores)
    if from_snapshot not in (LATEST, NONE):
        if storage is None:
            raise RestoreError(f"snapshot {from_snapshot!r} needs a snapshot storage")
        named = [m for m in list_snapshots(storage) if m.snapshot_id == from_snapshot]
        if not named:
            raise RestoreError(
                f"no snapshot {from_snapshot!r} of app {settings.application_id!r} in "
                f"{storage.url} (see `statekeeper snapshot list`)"
            )
        tasks, stores = tasks or [named[0].task], stores or [named[0].store]
    selected = tasks or restore_tasks(topology, settings, storage)
    if not selected:
        raise RestoreError(
            f"app {settings.application_id!r} has no local task and no snapshot to restore"
        )
    target = settings
    if to is not None:
        if Path(to).resolve() == Path(settings.state_dir).resolve():
            raise RestoreError(
                f"--to {to} is the app's own state root; omit --to to restore in place"
            )
        live_app = (Path(settings.state_dir) / settings.application_id).resolve()
        if (Path(to) / settings.application_id).resolve().is_relative_to(live_app):
            raise RestoreError(
                f"--to {to} lies inside the app's own state {live_app}: a copy is built "
                "outside it, so the live task directories are never written"
            )
        target = settings.model_copy(update={"state_dir": Path(to)})
    # Refuse before touching anything when any task is held by a running app.
    for task_id in selected:
        parse_task_id(task_id)
        ensure_stopped(target, task_id)
    env = StateEnvironment(target, read_only=to is not None)
    reports: list[StoreRestore] = []
    try:
        for task_id in selected:
            specs = topology.store_specs(parse_task_id(task_id)[0])
            if not specs:
                raise RestoreError(f"task {task_id} has no stores")
            chosen = [s.name for s in specs if stores is None or s.name in stores]
            if not chosen:
                continue
            reports += restore_task(
                env,
                storage,
                task_id,
                specs,
                stores=chosen,
                from_snapshot=from_snapshot,
                progress=progress,
            )
    finally:
        env.close()
    if not reports:
        raise RestoreError(f"no store {stores} in tasks {selected} of {settings.application_id!r}")
    return reports
