"""Migrating one task: the old version's committed state in, the new version's out.

:func:`migrate_task` reads the old task's state as its last commit left it
(:mod:`statekeeper.migration.old_state`: a scratch copy from the newest verified snapshot
and the changelog tail, read-only), iterates each store decoded with the OLD serdes, applies
the store's step (:mod:`statekeeper.migration.store_plan`: copy, migrate, start empty or
skip), and writes the result through the NEW version's stores of the NEW application id: a
:class:`~statekeeper.state.task_state_manager.TaskStateManager` opened for the new app's
task, whose change-logging layer writes ``<new-app>-<store>-changelog``. It then commits at
the old task's batch id and source offsets (the source topics', and the old repartition
topics', whose unconsumed records the new version reads once: the takeover), so the new
changelogs' commit markers sit at the same source offsets as the old ones (invariant 2), and
optionally snapshots the new task.

No Spark here: the job (:mod:`statekeeper.migration.job`) runs this once per task, on Spark
or in a loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from statekeeper.migration.functions import (
    MigrationError,
    StoreCounts,
    StoreMigration,
    migrated_columns,
    migrated_entries,
)
from statekeeper.migration.old_state import StorageOpener, committed_batch, old_task_state
from statekeeper.migration.rekey_plan import Rekey
from statekeeper.migration.store_plan import StoreAction, StoreStep
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.environment import StateEnvironment
from statekeeper.state.task_id import TaskId
from statekeeper.stores.typed import (
    PUT_CHUNK,
    KeyValueStore,
    entry_columns,
    put_entries,
    typed_entries,
)
from statekeeper.versions.compatibility import StoreChange


@dataclass(frozen=True)
class MigrationJob:
    """What every task's migration needs; picklable (it travels to Spark executors):
    settings, topologies, the store steps, the declared migrations (their functions are
    pickled by value, like the topology's), the source topics whose offsets are carried,
    and whether to snapshot each migrated task (with the new fingerprint, JSON)."""

    old_settings: StatekeeperSettings
    new_settings: StatekeeperSettings
    old_topology: Any
    new_topology: Any
    steps: tuple[StoreStep, ...]
    migrations: dict[str, StoreMigration]
    source_topics: frozenset[str]
    snapshot: bool = False
    new_fingerprint: dict[str, Any] | None = None
    #: The old version's repartition topics: their offsets are carried too, so the new
    #: task skips the old records it committed when it reads the rest (the takeover).
    old_repartition_topics: frozenset[str] = frozenset()
    #: Subtopologies whose state moves across tasks (their task count changed).
    rekeyed: tuple[Rekey, ...] = ()

    def rekey_of(self, subtopology: int) -> Rekey | None:
        return next((r for r in self.rekeyed if r.subtopology == subtopology), None)

    def step(self, store: str) -> StoreStep:
        return next(s for s in self.steps if s.store == store)

    def carried_offsets(self, offsets: dict[str, int]) -> dict[str, int]:
        """The old task's committed offsets the new task's markers carry: its source
        topics' and the old repartition topics' (``topic:partition`` -> offset)."""
        topics = self.source_topics | self.old_repartition_topics
        return {tp: o for tp, o in offsets.items() if tp.rpartition(":")[0] in topics}


@dataclass
class TaskMigration:
    """One task's result: the batch id and source offsets its new markers carry, and per
    store of the new version what was read, written and dropped. ``note``: why nothing was
    written (the old task never committed, or an earlier run migrated it already)."""

    task_id: str
    batch_id: int | None
    source_offsets: dict[str, int] = field(default_factory=dict)
    stores: dict[str, StoreCounts] = field(default_factory=dict)
    snapshots: list[str] = field(default_factory=list)
    #: Per old store, where its state was read from: ``snapshot <id>`` (then the changelog
    #: tail) or ``changelog`` (the whole changelog).
    read_from: dict[str, str] = field(default_factory=dict)
    note: str | None = None
    seconds: float = 0.0

    @property
    def migrated(self) -> bool:
        return self.note is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task_id,
            "batch_id": self.batch_id,
            "source_offsets": dict(self.source_offsets),
            "stores": {name: counts.as_dict() for name, counts in sorted(self.stores.items())},
            "snapshots": list(self.snapshots),
            "read_from": dict(sorted(self.read_from.items())),
            "note": self.note,
            "seconds": round(self.seconds, 3),
        }


def migrate_task(
    job: MigrationJob,
    task_id: str,
    *,
    storage: StorageOpener | None = None,
    scratch_root: Path | None = None,
    env: StateEnvironment | None = None,
) -> TaskMigration:
    """Migrate task ``task_id`` (module docstring). ``storage``: the old app's snapshots
    (default: its snapshot storage); ``scratch_root``: where the old task's scratch copy
    goes (default: the temporary directory); ``env``: the new app's state environment to
    write through (its changelog producers are reused across the tasks of one process: a
    new idempotent producer's first acknowledgement costs ~0.5 s on some brokers; default:
    one of its own, closed after)."""
    started = time.perf_counter()
    tid = TaskId.parse(task_id)
    old_specs = carried_specs(job, tid.subtopology)
    with old_task_state(
        job.old_settings,
        task_id,
        tid.partition,
        old_specs,
        storage=storage,
        scratch_root=scratch_root,
    ) as old:
        batch_id = settled_batch(job, task_id, old)
        if batch_id is None:
            return TaskMigration(
                task_id,
                None,
                note="the old task never committed: nothing to migrate"
                if old_specs
                else "no store of the old task is carried: it starts empty",
            )
        carried = job.carried_offsets(committed_batch(old)[1])
        result = TaskMigration(task_id, batch_id, carried, read_from=read_from(old))
        write_task(job, result, lambda new, spec: _write_store(job, old, new, spec), env)
    result.seconds = time.perf_counter() - started
    return result


def settled_batch(job: MigrationJob, task_id: str, old: Any) -> int | None:
    """The batch the old task's stores committed last (None: it never committed); raises
    when its stores disagree (a commit cut short between its markers)."""
    batch_id, _, behind = committed_batch(old)
    if behind:
        raise MigrationError(
            f"task {task_id} of {job.old_settings.application_id}: stores {behind} are "
            f"not at batch {batch_id} like the others (a commit cut short between its "
            "markers): start the old version once, which settles it, then migrate"
        )
    if batch_id is None or batch_id < 0:  # -1: a revert's marker, nothing committed
        return None
    return batch_id


#: ``fill(new_task, spec) -> counts``: writes one store of the new task.
Fill = Callable[[Any, Any], StoreCounts]


def write_task(
    job: MigrationJob, result: TaskMigration, fill: Fill, env: StateEnvironment | None
) -> None:
    """Open the new version's task ``result.task_id``, write each of its stores with
    ``fill``, commit at ``result.batch_id`` and ``result.source_offsets`` (the old commit's)
    and snapshot it (``job.snapshot``); ``result`` gets the counts and snapshot ids. A task
    committed there already (a job that died after it) is left as it is."""
    tid = TaskId.parse(result.task_id)
    new_specs = job.new_topology.store_specs(tid.subtopology)
    batch_id, carried = result.batch_id, result.source_offsets
    assert batch_id is not None
    own_env = env is None
    task_env = StateEnvironment(job.new_settings) if env is None else env
    try:
        new = task_env.task(result.task_id, tid.partition, new_specs)
        new.open()
        try:
            if (new.last_batch_id, new.committed_offsets) == (batch_id, carried):
                # A job that died after this task: it is done already.
                result.note = f"migrated already (batch {batch_id}): left as it is"
                result.read_from = {}
                return
            if new.last_batch_id is not None and new.last_batch_id >= 0:
                # (-1: a migration that died before its commit, reverted by this open)
                raise MigrationError(
                    f"task {result.task_id} of {job.new_settings.application_id} has "
                    f"committed state already (batch {new.last_batch_id}): migrate writes a "
                    "new application id's first state; delete that app's state and "
                    "changelogs to migrate again"
                )
            for spec in new_specs:
                result.stores[spec.name] = fill(new, spec)
            new.commit(batch_id, carried)
            if job.snapshot:
                result.snapshots = _snapshot(job, new)
        finally:
            new.close()
    finally:
        if own_env:
            task_env.close()


def carried_specs(job: MigrationJob, subtopology: int) -> list[Any]:
    """The old task's stores that are copied or migrated (dropped ones are not read)."""
    if subtopology not in {sub.id for sub in job.old_topology.subtopologies}:
        return []
    carried = {s.store for s in job.steps if s.action in (StoreAction.COPY, StoreAction.MIGRATE)}
    return [spec for spec in job.old_topology.store_specs(subtopology) if spec.name in carried]


def read_from(old: Any) -> dict[str, str]:
    """Per store of an opened old task, where its state came from: ``snapshot <id>`` (then
    the changelog tail) or ``changelog``."""
    found = {}
    for slot in old.slots:
        install = old.installs.get(slot.spec.name) or {}
        if install.get("source") == "snapshot":
            found[slot.spec.name] = f"snapshot {install.get('snapshot_id')}"
        elif slot.topic is not None:
            found[slot.spec.name] = "changelog"
    return found


def _write_store(job: MigrationJob, old: Any, new: Any, spec: Any) -> StoreCounts:
    counts = StoreCounts()
    if job.step(spec.name).action is StoreAction.EMPTY:
        return counts
    source, target = old.store(spec.name), new.store(spec.name)
    migration = _per_record_migration(job, spec.name)
    both_kv = isinstance(source, KeyValueStore) and isinstance(target, KeyValueStore)
    step = job.step(spec.name)
    if both_kv and step.action is StoreAction.COPY and step.change is StoreChange.UNCHANGED:
        # The same serdes: the stored bytes are the new version's too, copied as they are.
        raw = source.wrapped.all()
        while chunk := list(islice(raw, PUT_CHUNK)):
            target.wrapped.put_all(chunk)
            counts.read += len(chunk)
            counts.written += len(chunk)
        return counts
    if both_kv and migration:
        # A chunk at a time as columns: decoded, migrated and encoded in bulk.
        for keys, values in entry_columns(source):
            if migration is not _COPY:
                keys, values = migrated_columns(migration, keys, values, counts)
            else:
                counts.read += len(keys)
            target.put_columns(keys, values)
            counts.written += len(keys)
        return counts
    write_entries(target, migrated_store(job, old, spec.name, counts), counts)
    return counts


#: :func:`_per_record_migration` of a store copied as it is.
_COPY = StoreMigration("", "record", lambda key, value: (key, value))


def _per_record_migration(job: MigrationJob, store: str) -> StoreMigration | None:
    """The store's migration when it applies entry by entry (a copy: ``_COPY``); None for a
    whole-store function."""
    if job.step(store).action is StoreAction.COPY:
        return _COPY
    migration = job.migrations.get(store)
    return migration if migration is not None and migration.kind == "record" else None


def migrated_store(
    job: MigrationJob, old: Any, store: str, counts: StoreCounts
) -> Iterator[tuple[Any, Any]]:
    """The old task's entries of a copied or migrated ``store`` as the new version holds
    them (the store's migration applied), counting reads and drops into ``counts``."""
    entries = typed_entries(old.store(store))
    if job.step(store).action is StoreAction.MIGRATE:
        migration = job.migrations.get(store)
        if migration is None:  # store_steps only says migrate when one is declared
            raise MigrationError(f"store {store}: no migration function given")
        return migrated_entries(migration, entries, counts)
    return _counted(entries, counts)


def write_entries(target: Any, entries: Iterable[tuple[Any, Any]], counts: StoreCounts) -> None:
    """Write ``entries`` into a new store, counting what was written and what fell past a
    window store's retention (dropped)."""
    written, dropped = put_entries(target, entries)
    counts.written += written
    counts.dropped += dropped


def _counted(entries: Iterable[tuple[Any, Any]], counts: StoreCounts) -> Iterator[tuple[Any, Any]]:
    for entry in entries:
        counts.read += 1
        yield entry


def _snapshot(job: MigrationJob, task: Any) -> list[str]:
    """Snapshot the new task right after its commit; the snapshot ids."""
    from statekeeper.snapshots.create import snapshot_now

    return snapshot_now(job.new_settings, task, topology=job.new_fingerprint)
