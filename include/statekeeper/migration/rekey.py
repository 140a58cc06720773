"""Re-keying a subtopology's state into another number of tasks (repartitioning).

Two halves, like a shuffle (on Spark they are one: ``flatMap`` → ``partitionBy`` →
``mapPartitionsWithIndex``):

- :func:`routed_entries`, per OLD task: its committed state read as a migration reads it
  (:func:`statekeeper.migration.task.migrated_store`: the store's migration applied), each
  entry tagged with the NEW task that holds its key: ``murmur2(key bytes) % new_tasks``, the
  key serialized with the new store's key serde, as the new version's repartition sink routes
  it. Every new task also gets the old task's commit (batch id, offsets) and its internal
  task state.
- :func:`write_rekeyed`, per NEW task: its entries written through the new version's stores,
  committed at the newest of the old tasks' batch ids with the union of their offsets: the
  old repartition topics' offsets of every old partition, since the new task holds keys from
  all of them and reads each one's uncommitted tail once (filtered to its keys: the
  takeover's ``fan_out``). The internal task state is merged
  (:func:`statekeeper.processing.task_state_store.merged_task_state`).

Entries move as decoded Python values (pickled by Spark's shuffle, held in a list per new
task in a local run).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.kafka.partitioning import partition_for_key
from statekeeper.migration.functions import MigrationError, StoreCounts
from statekeeper.migration.old_state import StorageOpener, committed_batch, old_task_state
from statekeeper.migration.rekey_plan import Rekey
from statekeeper.migration.store_plan import StoreAction
from statekeeper.migration.task import (
    MigrationJob,
    TaskMigration,
    carried_specs,
    migrated_store,
    read_from,
    settled_batch,
    write_entries,
    write_task,
)
from statekeeper.processing.task_state_store import STORE_PREFIX, merged_task_state
from statekeeper.state.environment import StateEnvironment
from statekeeper.state.task_id import TaskId
from statekeeper.stores.serdes import serde_for


@dataclass(frozen=True)
class OldCommitPart:
    """One old task's commit, sent to every new task: ``batch_id`` None when it never
    committed; ``read_from`` per store (snapshot or changelog)."""

    old_partition: int
    batch_id: int | None
    offsets: dict[str, int]
    read_from: dict[str, str]


#: What flows from an old task to a new one: a commit, an entry ``(store, key, value)``, or
#: an internal task-state entry ``(old partition, key, value)``.
Routed = OldCommitPart | tuple[str, Any, Any] | tuple[int, str, Any]


def routed_entries(
    job: MigrationJob,
    rekey: Rekey,
    old_partition: int,
    *,
    storage: StorageOpener | None = None,
    scratch_root: Path | None = None,
) -> Iterator[tuple[int, tuple[str, Routed]]]:
    """``(new partition, (kind, item))`` for everything old task ``old_partition`` of the
    re-keyed subtopology holds (module docstring); kinds: ``commit``, ``entry``, ``state``."""
    sub = rekey.subtopology
    task_id = str(TaskId(sub, old_partition))
    specs = carried_specs(job, sub)
    everyone = range(rekey.new_tasks)
    with old_task_state(
        job.old_settings,
        task_id,
        old_partition,
        specs,
        storage=storage,
        scratch_root=scratch_root,
    ) as old:
        batch_id = settled_batch(job, task_id, old)
        offsets = {} if batch_id is None else job.carried_offsets(committed_batch(old)[1])
        commit = OldCommitPart(old_partition, batch_id, offsets, read_from(old))
        if batch_id is not None:
            for spec in specs:
                if spec.name.startswith(STORE_PREFIX):
                    for key, value in old.store(spec.name).all():
                        for p in everyone:
                            yield p, ("state", (old_partition, key, value))
                    continue
                counts = StoreCounts()
                route = router(job, sub, spec.name, rekey.new_tasks)
                for key, value in migrated_store(job, old, spec.name, counts):
                    yield route(key), ("entry", (spec.name, key, value))
        for p in everyone:
            yield p, ("commit", commit)


def write_rekeyed(
    job: MigrationJob,
    rekey: Rekey,
    new_partition: int,
    routed: Iterable[tuple[str, Routed]],
    *,
    env: StateEnvironment | None = None,
) -> TaskMigration:
    """Write new task ``new_partition`` from what :func:`routed_entries` sent it (module
    docstring); one :class:`TaskMigration`, its counts those of the entries it received."""
    started = time.perf_counter()
    task_id = str(TaskId(rekey.subtopology, new_partition))
    commits: list[OldCommitPart] = []
    entries: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
    states: dict[int, list[tuple[str, Any]]] = defaultdict(list)
    for kind, item in routed:
        if kind == "commit":
            commits.append(item)  # type: ignore[arg-type]
        elif kind == "entry":
            store, key, value = item  # type: ignore[misc]
            entries[store].append((key, value))
        else:
            partition, key, value = item  # type: ignore[misc]
            states[partition].append((key, value))
    if len(commits) != rekey.old_tasks:
        raise MigrationError(
            f"task {task_id}: {len(commits)} of {rekey.old_tasks} old tasks' commits arrived "
            "(a lost shuffle block?): run the migration again"
        )
    committed = [c for c in commits if c.batch_id is not None]
    if not committed:
        return TaskMigration(task_id, None, note="no old task of its subtopology committed")
    offsets = {tp: o for c in committed for tp, o in c.offsets.items()}
    result = TaskMigration(
        task_id,
        max(c.batch_id for c in committed if c.batch_id is not None),
        dict(sorted(offsets.items())),
        read_from=_sources(commits),
    )

    def fill(new: Any, spec: Any) -> StoreCounts:
        counts = StoreCounts()
        if job.step(spec.name).action is StoreAction.EMPTY:
            return counts
        if spec.name.startswith(STORE_PREFIX):
            rows = merged_task_state(states, job.old_repartition_topics)
        else:
            rows = entries.pop(spec.name, [])
        counts.read = len(rows)
        write_entries(new.store(spec.name), rows, counts)
        return counts

    write_task(job, result, fill, env)
    result.seconds = time.perf_counter() - started
    return result


def migrate_rekeyed_locally(
    job: MigrationJob,
    rekey: Rekey,
    *,
    env: StateEnvironment,
    scratch_root: Path | None = None,
) -> list[TaskMigration]:
    """Both halves in this process: every old task read and routed into a list per new
    task, then every new task written."""
    buckets: dict[int, list[tuple[str, Routed]]] = defaultdict(list)
    for q in range(rekey.old_tasks):
        for p, item in routed_entries(job, rekey, q, scratch_root=scratch_root):
            buckets[p].append(item)
    return [
        write_rekeyed(job, rekey, p, buckets.pop(p, []), env=env) for p in range(rekey.new_tasks)
    ]


def migrate_rekeyed_on_spark(
    job: MigrationJob, rekey: Rekey, spark_context: Any
) -> list[TaskMigration]:
    """Both halves as one Spark job: one Spark task per old task, a shuffle by new
    partition, one Spark task per new task."""

    def write(p: int, items: Iterator[tuple[int, tuple[str, Routed]]]) -> list[TaskMigration]:
        return [write_rekeyed(job, rekey, p, (item for _, item in items))]

    return (
        spark_context.parallelize(range(rekey.old_tasks), max(1, rekey.old_tasks))
        .flatMap(lambda q: routed_entries(job, rekey, q))
        .partitionBy(rekey.new_tasks, lambda p: p)
        .mapPartitionsWithIndex(write)
        .collect()
    )


def router(job: MigrationJob, sub: int, store: str, partitions: int) -> Any:
    """``route(key) -> new partition`` for one store's (new) keys."""
    spec = next(s for s in job.new_topology.store_specs(sub) if s.name == store)
    serde = serde_for(spec.key_serde)
    window = spec.kind == "window"

    def route(key: Any) -> int:
        raw = serde.serialize(key[0] if window else key)
        return partition_for_key(raw, partitions)

    return route


def _sources(commits: list[OldCommitPart]) -> dict[str, str]:
    by_store: dict[str, list[str]] = defaultdict(list)
    for c in sorted(commits, key=lambda c: c.old_partition):
        for store, where in c.read_from.items():
            by_store[store].append(f"{c.old_partition}: {where}")
    return {store: "; ".join(wheres) for store, wheres in sorted(by_store.items())}
