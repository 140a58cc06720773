"""``migrate_app``: every task of an app's old version migrated to the new version.

On the driver: both topologies are built, the new app's topics are created as its start
would create them (changelogs, repartition topics, DLQ, outputs: :func:`prepare_topics`),
each store's step is decided (:func:`statekeeper.migration.store_plan.store_steps`, which
refuses what is not possible) and the declared migration functions are imported. Then one
:func:`~statekeeper.migration.task.migrate_task` per stateful task: on Spark in as many
Spark tasks as there are cores, each migrating its share of the stream tasks in parallel on
the executors, or in a loop here (``spark_context=None``). Last, the new
version's fingerprint is recorded in its state root, so its start check reads it.

A subtopology whose task count changed (a source topic's partition count changed, and the
repartition topics derived from it) has its state re-keyed across its new tasks
(:mod:`statekeeper.migration.rekey`): the old task counts come from the old changelogs
(:func:`old_task_counts`).

Refused up front: the same application id for both versions (the new version writes its
own changelogs: a new id, blue/green), a carried store whose old changelog does not exist,
a re-keyed subtopology that reads a source topic directly
(:mod:`statekeeper.migration.rekey_plan`), and whatever :func:`store_steps` refuses.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.app.spec import AppSpec
from statekeeper.app.topics import prepare_topics, source_partitions, task_plan
from statekeeper.changelog.records import changelog_topic
from statekeeper.kafka.admin import make_admin, partition_count, wait_for_broker
from statekeeper.migration.functions import MigrationError, MigrationRefused, StoreMigration
from statekeeper.migration.rekey import migrate_rekeyed_locally, migrate_rekeyed_on_spark
from statekeeper.migration.rekey_plan import plan_rekeys, task_counts
from statekeeper.migration.store_plan import StoreAction, StoreStep, store_steps
from statekeeper.migration.takeover_plan import OldCommit, plan_takeover, read_takeover_facts
from statekeeper.migration.task import MigrationJob, TaskMigration, migrate_task
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.environment import StateEnvironment
from statekeeper.state.task_id import TaskId
from statekeeper.versions.compatibility import StoreChange, compare
from statekeeper.versions.fingerprint import (
    FingerprintError,
    TopologyFingerprint,
    fingerprint_of,
)
from statekeeper.versions.recorded import read_recorded, state_root, write_recorded
from statekeeper.versions.takeover import Takeover, takeover_path, write_takeover

#: Called once per task as it finishes (locally) or once the job is collected (Spark).
Progress = Callable[[TaskMigration], None]


@dataclass
class MigrationReport:
    """What :func:`migrate_app` did: the store steps, one result per task, and notes."""

    old_application_id: str
    new_application_id: str
    steps: list[StoreStep]
    tasks: list[TaskMigration] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    on_spark: bool = False
    seconds: float = 0.0
    #: Where the new version takes over (written to its state root's takeover.json).
    takeover: Takeover | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "old_application_id": self.old_application_id,
            "new_application_id": self.new_application_id,
            "on_spark": self.on_spark,
            "stores": [s.as_dict() for s in self.steps],
            "tasks": [t.as_dict() for t in self.tasks],
            "notes": list(self.notes),
            "takeover": None if self.takeover is None else self.takeover.to_dict(),
            "seconds": round(self.seconds, 3),
        }


def migrate_app(
    old_spec: AppSpec,
    new_spec: AppSpec,
    *,
    old_settings: StatekeeperSettings | None = None,
    new_settings: StatekeeperSettings | None = None,
    spark_context: Any = None,
    progress: Progress | None = None,
    snapshot: bool = True,
    scratch_root: Path | None = None,
) -> MigrationReport:
    """Migrate every stateful task of ``old_spec``'s app to ``new_spec``'s (module
    docstring). Settings default to each spec's resolved settings; ``spark_context``: run
    the stream tasks on Spark, a share per core (None: in a loop, here); ``snapshot``: snapshot each
    migrated task into the new app's snapshot storage; ``scratch_root``: where the old
    tasks' scratch copies go (local runs)."""
    started = time.perf_counter()
    prepared = prepare_migration(
        old_spec,
        new_spec,
        old_settings or old_spec.resolved_settings(),
        new_settings or new_spec.resolved_settings(),
        snapshot=snapshot,
    )
    report = run_migration(
        prepared,
        spark_context=spark_context,
        progress=progress,
        scratch_root=scratch_root,
    )
    report.seconds = time.perf_counter() - started
    return report


@dataclass(frozen=True)
class PreparedMigration:
    """What :func:`prepare_migration` decided: the job every task runs, the stateful task
    ids (sorted), notes, and the partition counts of the source topics and of both
    versions' repartition topics (for the takeover)."""

    job: MigrationJob
    tasks: list[str]
    notes: list[str]
    partitions: dict[str, int] = field(default_factory=dict)


def run_migration(
    prepared: PreparedMigration,
    *,
    spark_context: Any = None,
    progress: Progress | None = None,
    scratch_root: Path | None = None,
) -> MigrationReport:
    """Run a prepared migration's tasks (on Spark when ``spark_context`` is given) and
    record the new version's fingerprint in its state root."""
    started = time.perf_counter()
    job, tasks = prepared.job, prepared.tasks
    report = MigrationReport(
        job.old_settings.application_id,
        job.new_settings.application_id,
        list(job.steps),
        notes=list(prepared.notes),
        on_spark=spark_context is not None,
    )
    new_root = state_root(job.new_settings.state_dir, job.new_settings.application_id)
    # Until the takeover is planned the new version must not start on this state: a start
    # without it would process the old version's input again (statekeeper.app.takeover_start).
    write_takeover(takeover_path(new_root), _pending(job))
    # Tasks of a re-keyed subtopology are written from all its old tasks at once.
    tasks = [t for t in tasks if job.rekey_of(TaskId.parse(t).subtopology) is None]

    def done(result: TaskMigration) -> None:
        report.tasks.append(result)
        if progress is not None:
            progress(result)

    if spark_context is not None:
        # As many Spark tasks as the cores, each migrating its share of the stream tasks
        # through one state environment (a new idempotent producer's first acknowledgement
        # costs ~0.5 s on some brokers: once per Spark task, not once per stream task).
        slices = max(1, min(len(tasks), spark_context.defaultParallelism))
        results = (
            spark_context.parallelize(tasks, slices)
            .mapPartitions(lambda task_ids: _migrate_share(job, list(task_ids)))
            .collect()
            if tasks
            else []
        )
        for rekey in job.rekeyed:
            results += migrate_rekeyed_on_spark(job, rekey, spark_context)
        for result in results:
            done(result)
    else:
        # One state environment (and its producers) for every task of this loop.
        env = StateEnvironment(job.new_settings)
        try:
            for task_id in tasks:
                done(migrate_task(job, task_id, scratch_root=scratch_root, env=env))
            for rekey in job.rekeyed:
                for result in migrate_rekeyed_locally(
                    job, rekey, env=env, scratch_root=scratch_root
                ):
                    done(result)
        finally:
            env.close()
    report.tasks.sort(key=lambda t: TaskId.parse(t.task_id))
    report.takeover = plan_takeover(
        old_topology=job.old_topology,
        new_topology=job.new_topology,
        old_app=job.old_settings.application_id,
        new_app=job.new_settings.application_id,
        partitions=prepared.partitions,
        commits=[OldCommit(t.task_id, t.batch_id, t.source_offsets) for t in report.tasks],
        facts=read_takeover_facts(job.old_settings, job.old_topology, prepared.partitions),
    )
    report.notes += report.takeover.notes
    assert job.new_fingerprint is not None
    write_recorded(new_root, TopologyFingerprint.from_dict(job.new_fingerprint))
    write_takeover(takeover_path(new_root), report.takeover)
    report.seconds = time.perf_counter() - started
    return report


def _migrate_share(job: MigrationJob, task_ids: list[str]) -> list[TaskMigration]:
    """One Spark task's share of the stream tasks, migrated through one state environment."""
    if not task_ids:
        return []
    env = StateEnvironment(job.new_settings)
    try:
        return [migrate_task(job, task_id, env=env) for task_id in task_ids]
    finally:
        env.close()


def prepare_migration(
    old_spec: AppSpec,
    new_spec: AppSpec,
    old_settings: StatekeeperSettings,
    new_settings: StatekeeperSettings,
    *,
    snapshot: bool = True,
    create_topics: bool = True,
) -> PreparedMigration:
    """Decide everything before any state is read: the job every task runs, the stateful
    task ids and notes; creates the new app's topics (``create_topics``; a diff of two
    running versions creates nothing). Raises
    :class:`~statekeeper.migration.functions.MigrationRefused` (or another
    :class:`MigrationError`) for what cannot be migrated."""
    old_app, new_app = old_settings.application_id, new_settings.application_id
    if old_app == new_app:
        raise MigrationError(
            f"the old and new versions are both application id {new_app!r}: a migration "
            "writes the new version's state under a new application id (its own changelogs "
            "and snapshots); give the new spec another application_id"
        )
    old_topology, new_topology = old_spec.build_topology(), new_spec.build_topology()
    timeout = new_settings.broker_timeout_s
    wait_for_broker(new_settings.bootstrap_servers, timeout)
    admin = make_admin(new_settings.bootstrap_servers)
    now = source_partitions(admin, new_topology, new_app, timeout)
    old_now = source_partitions(admin, old_topology, old_app, timeout)
    recorded = _recorded_fingerprint(old_settings)
    _check_old_spec_wrote_the_state(old_topology, old_app, old_now, recorded)
    recorded_partitions = None if recorded is None else recorded[1].source_partitions
    old_fp = fingerprint_of(old_topology, new_app, {**old_now, **(recorded_partitions or {})})
    new_fp = fingerprint_of(new_topology, new_app, now)
    steps = store_steps(compare(old_fp, new_fp), old_fp, new_fp, set(new_spec.migrations))
    old_tasks = old_task_counts(admin, old_app, steps, timeout)
    new_tasks = task_counts(
        new_topology, new_app, {**now, **new_topology.repartition_partitions(new_app, now)}
    )
    rekeys = plan_rekeys(new_topology, new_app, old_tasks, new_tasks)
    migrations = {
        store: StoreMigration(
            store, declared.kind, new_spec.migration_function(store), declared.ref
        )
        for store, declared in new_spec.migrations.items()
    }
    plan = (
        prepare_topics(admin, new_topology, new_app, timeout, now)
        if create_topics
        else task_plan(new_topology, new_app, now)
    )
    stateful = {s.id for s in new_topology.subtopologies if new_topology.store_specs(s.id)}
    tasks = [str(TaskId(sub, p)) for sub, p in plan.tasks if sub in stateful]
    job = MigrationJob(
        old_settings=old_settings,
        new_settings=new_settings,
        old_topology=old_topology,
        new_topology=new_topology,
        steps=tuple(steps),
        migrations=migrations,
        source_topics=frozenset(new_fp.source_topics),
        old_repartition_topics=frozenset(old_topology.internal_topics(old_app)),
        snapshot=snapshot,
        new_fingerprint=new_fp.to_dict(),
        rekeyed=tuple(rekeys),
    )
    partitions = {
        **now,
        **new_topology.repartition_partitions(new_app, now),
        **old_repartition_partitions(admin, old_topology, old_app, old_now, timeout),
    }
    return PreparedMigration(
        job, sorted(tasks, key=TaskId.parse), _notes(recorded_partitions), partitions
    )


def old_task_counts(
    admin: Any, old_app: str, steps: list[StoreStep], timeout_s: float
) -> dict[int, int]:
    """Per subtopology with a carried store, how many tasks the old state has: its
    changelogs' partition count (one partition per task, whatever the source topics hold
    now). Raises :class:`MigrationRefused` naming every carried store whose old changelog
    does not exist, and every subtopology whose changelogs disagree."""
    counts: dict[int, dict[str, int]] = {}
    problems = []
    for step in steps:
        if step.action not in (StoreAction.COPY, StoreAction.MIGRATE):
            continue
        assert step.subtopology is not None
        topic = changelog_topic(old_app, step.store)
        count = partition_count(admin, topic, timeout_s)
        if count is None:
            problems.append(
                f"store {step.store}: the old app has no changelog {topic} (did it ever run "
                "with this topology?)"
            )
        else:
            counts.setdefault(step.subtopology, {})[topic] = count
    for sub, topics in sorted(counts.items()):
        if len(set(topics.values())) > 1:
            problems.append(
                f"subtopology {sub}: its old changelogs disagree on its task count ({topics})"
            )
    if problems:
        raise MigrationRefused("cannot migrate: " + "; ".join(problems))
    return {sub: next(iter(topics.values())) for sub, topics in counts.items()}


def old_repartition_partitions(
    admin: Any, old_topology: Any, old_app: str, sources: dict[str, int], timeout_s: float
) -> dict[str, int]:
    """The old version's repartition topics' partition counts as the broker has them (a
    source expanded since kept them), else as the old topology derives them."""
    derived = old_topology.repartition_partitions(old_app, sources)
    return {t: partition_count(admin, t, timeout_s) or n for t, n in derived.items()}


def _recorded_fingerprint(
    settings: StatekeeperSettings,
) -> tuple[str, TopologyFingerprint] | None:
    """Where the old state's fingerprint is recorded and the fingerprint: its state root's
    ``topology.json``, else its newest snapshot's; None when neither records one."""
    root = state_root(settings.state_dir, settings.application_id)
    try:
        found = read_recorded(root)
    except FingerprintError:
        found = None
    if found is not None:
        return str(root / "topology.json"), found
    return _newest_snapshot_fingerprint(settings)


def _check_old_spec_wrote_the_state(
    old_topology: Any,
    old_app: str,
    partitions: dict[str, int],
    recorded: tuple[str, TopologyFingerprint] | None,
) -> None:
    """The ``--from`` spec must be the version that wrote the state: its stores are read with
    that topology's serdes. Refuses when the recorded fingerprint says a store was written
    otherwise (another serde, kind or window size)."""
    if recorded is None:
        return
    where, fingerprint = recorded
    differences = [
        v
        for v in compare(fingerprint, fingerprint_of(old_topology, old_app, partitions)).stores
        if v.change is StoreChange.NEEDS_MIGRATION
    ]
    if differences:
        raise MigrationRefused(
            f"the old version's spec is not the topology that wrote its state ({where}): "
            + "; ".join(v.reason for v in differences)
            + ": give --from the spec of the version that ran"
        )


def _newest_snapshot_fingerprint(
    settings: StatekeeperSettings,
) -> tuple[str, TopologyFingerprint] | None:
    from statekeeper.snapshots.manifest import SnapshotError
    from statekeeper.snapshots.recorded_topology import newest_recorded_topology
    from statekeeper.snapshots.storage import storage_for

    try:
        found = newest_recorded_topology(storage_for(settings, create=False))
    except (SnapshotError, OSError):
        return None
    if found is None:
        return None
    manifest, raw = found
    where = f"snapshot {manifest.snapshot_id}"
    try:
        return where, TopologyFingerprint.from_dict(raw, where)
    except FingerprintError:
        return None


def _pending(job: MigrationJob) -> Takeover:
    """The record that stops the new version from starting before the takeover is planned."""
    return Takeover(
        from_application_id=job.old_settings.application_id,
        batch_base=0,
        start_offsets={},
        floors={},
        extra={"pending": f"a migration from {job.old_settings.application_id} is running"},
    )


def _notes(recorded: dict[str, int] | None) -> list[str]:
    notes = []
    if recorded is None:
        notes.append(
            "the old state records no fingerprint (no topology.json, no snapshot with one): "
            "the --from spec is trusted to be the version that wrote it, and source "
            "partition counts are checked against the old changelogs only"
        )
    return notes
