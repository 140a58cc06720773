"""Runs a Spark task's share of a micro-batch on an executor (R3, docs/invariants.md).

Per stream task: lock → open stores (restore if needed) → replay uncommitted backlog
batches the state lost → skip processed offsets → read the task's offset ranges from Kafka
→ process → flush outputs → commit (changelog, markers, stores) when the commit interval is
due → return metrics. The task reads its ranges itself (R2): Spark carries only offsets.
Afterwards the task stays open in this worker with its lock held (parked, see
:mod:`statekeeper.worker.parked_tasks`), holding any uncommitted batches: its next batch
here skips lock, open and restore, and its consumer has read ahead. The parked tasks a
worker runs in one batch commit together (one wait for their records, one marker round
trip). A failed task is closed and unlocked instead; its uncommitted batches are replayed.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

from statekeeper.cluster.executor import current_executor, executor_state_dir
from statekeeper.errors import StatekeeperError
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.consumed_run import sampled_payload_bytes
from statekeeper.kafka.model import OffsetRange, tp_key
from statekeeper.placement.assignment import Assignment
from statekeeper.placement.published import still_placed_here
from statekeeper.placement.shares import take_share
from statekeeper.settings import StatekeeperSettings
from statekeeper.stores.rocksdb_memory import rocksdb_memory
from statekeeper.worker.parked_tasks import ParkedTask
from statekeeper.worker.task_run import TaskRun, TaskRunResult

log = logging.getLogger("statekeeper.worker")


class _WorkerServices:
    """Per-process clients, reused across tasks when Spark reuses the Python worker.

    Nothing depends on reuse for correctness (Spark reuses workers at random); it only
    saves connecting a producer and restorer per task.
    """

    def __init__(self, settings: StatekeeperSettings) -> None:
        from statekeeper.processing.output_producer import OutputProducer
        from statekeeper.state.environment import StateEnvironment
        from statekeeper.state.restore_progress import RestoreProgressFile
        from statekeeper.worker.parked_tasks import ParkedTasks
        from statekeeper.worker.task_snapshots import TaskSnapshots

        # On a cluster each executor may have its own state directory (its environment).
        state_dir = executor_state_dir(settings.state_dir)
        if state_dir != settings.state_dir:
            settings = settings.model_copy(update={"state_dir": state_dir})
        self.settings = settings
        self.progress = RestoreProgressFile()
        self.env = StateEnvironment(settings, [self.progress], check_broker=False)
        self.outputs = OutputProducer(settings.bootstrap_servers)
        self.consumer_conf = consumer_config(
            settings.bootstrap_servers, group_id=f"{settings.application_id}-tasks"
        )
        self.busy = threading.Lock()
        self.parked = ParkedTasks(commit_before_release=ParkedTask.commit_held, busy=self.busy)
        self.snapshots = TaskSnapshots(settings, self.env.listener)

    def close(self) -> None:
        """Close the parked tasks (the next holder replays what they had not committed), the
        snapshot uploader (queued uploads finish, bounded), the output producer and the
        changelog producers."""
        self.parked.close_all()
        self.snapshots.close()
        self.outputs.close()
        self.env.close()


#: Every services object alive in this process, so they can be closed (weak: an evicted one
#: that nothing else holds goes as before).
_ALIVE_SERVICES: weakref.WeakSet[_WorkerServices] = weakref.WeakSet()


@functools.lru_cache(maxsize=4)
def _services(settings_json: str) -> _WorkerServices:
    services = _WorkerServices(StatekeeperSettings.model_validate_json(settings_json))
    _ALIVE_SERVICES.add(services)
    return services


def close_worker_services() -> None:
    """Close and forget this process's per-process clients and parked tasks (tests, and a
    process that stops hosting tasks); the next task starts new ones."""
    alive = list(_ALIVE_SERVICES)  # before the cache lets go of them
    _services.cache_clear()
    for services in alive:
        _ALIVE_SERVICES.discard(services)
        services.close()


#: How long a worker waits for a busy task's holder to claim it before asking for the lock
#: (Spark tasks of one batch start a few milliseconds apart).
CLAIM_GRACE_S = 0.1


def run_share(
    index: int,
    shares: list[list[TaskRun]],
    job: str,
    topology: Any,
    settings_json: str,
    assignment_json: str | None = None,
) -> list[TaskRunResult | ExecutorReport | StaleCopyClosed]:
    """One Spark task of a batch: run the tasks parked in this worker, then one share of
    this executor's tasks that no other Spark task took; returns one result per task run
    here (and this executor's services report, when it hosts any).

    Every task of the batch ends up run exactly once per ``job``: a parked task by the
    worker holding it (it claims it first, :mod:`batch_claims`), any other by the worker
    that took its share. Skipping a claimed task is safe because a claim is written by the
    lock holder, which runs the task before letting the lock go. A run placed on another
    executor (``TaskRun.executor``) is never run here: Spark does not pin Spark tasks to
    executors, so each one picks, on the executor it landed on, a share placed there
    (:func:`~statekeeper.placement.shares.take_share`); a share nobody took runs in the
    driver's next pass.
    """
    from statekeeper.worker.gc_freeze import (
        frozen_after_share,
        in_spark_task,
        raised_gc_threshold,
    )

    services = _services(settings_json)
    settings = services.settings
    executor = current_executor()
    if assignment_json is not None:
        _follow_assignment(settings, executor, topology, assignment_json)
    # ``busy`` is held while this worker runs tasks: the parked-task watcher commits a task
    # it hands over only while the worker is idle (see ParkedTasks).
    with (
        frozen_after_share(settings.worker_full_gc_every, in_spark_worker=in_spark_task()),
        services.busy,
        raised_gc_threshold(settings.worker_gc_threshold),
    ):
        stale: dict[str, str] = {}
        ran = _run_share(index, shares, job, topology, services, executor.executor_id, stale)
        if ran:  # uploads this worker finished meanwhile, of any task
            ran[0].snapshots.extend(services.snapshots.drain_uploads())
    if services.snapshots.uploads_spooled:  # the service process uploads them: start it
        from statekeeper.worker.executor_services import ensure_executor_services

        ensure_executor_services(settings, settings.state_dir, executor, topology, uploads=True)
    results: list[TaskRunResult | ExecutorReport | StaleCopyClosed] = list(ran)
    results += [StaleCopyClosed(t, executor.executor_id, why) for t, why in stale.items()]
    results += _executor_report(settings, executor)
    return results


def executor_report(
    _index: int, topology: Any, settings_json: str, assignment_json: str
) -> list[ExecutorReport]:
    """A Spark task that runs no stream task: it hands the assignment to its executor, starts
    the executor's services if none runs, and returns the executor's report (an idle app's
    standby lag and events would otherwise wait for the next batch)."""
    settings = _services(settings_json).settings
    executor = current_executor()
    _follow_assignment(settings, executor, topology, assignment_json)
    return _executor_report(settings, executor)


def _follow_assignment(
    settings: StatekeeperSettings, executor: Any, topology: Any, assignment_json: str
) -> None:
    """Hand the driver's assignment to this executor and start its services if none runs."""
    from statekeeper.placement.published import publish_assignment
    from statekeeper.worker.executor_services import ensure_executor_services

    publish_assignment(settings.state_dir, Assignment.from_json(assignment_json))
    ensure_executor_services(settings, settings.state_dir, executor, topology)


def _executor_report(settings: StatekeeperSettings, executor: Any) -> list[ExecutorReport]:
    """This executor's services report, when its services have written one."""
    from statekeeper.worker.executor_services import read_report

    report = read_report(settings.state_dir, settings.application_id)
    return [] if report is None else [ExecutorReport(executor.executor_id, executor.host, report)]


@dataclass
class StaleCopyClosed:
    """A copy of ``task`` left open in a worker of ``executor_id`` that was closed without a
    commit because the task had moved (``reason``), sent back beside the task results."""

    task: str
    executor_id: str
    reason: str


@dataclass
class ExecutorReport:
    """An executor's services report (standby lag and events, the query server's port),
    sent back beside the task results."""

    executor_id: str
    host: str
    report: dict[str, Any]


def _run_share(
    index: int,
    shares: list[list[TaskRun]],
    job: str,
    topology: Any,
    services: _WorkerServices,
    me: str,
    stale: dict[str, str],
) -> list[TaskRunResult]:
    """Run this worker's parked tasks of the batch and one share (see :func:`run_share`);
    ``stale`` collects the parked copies closed because their task moved."""
    from statekeeper.state.directory import TaskDirectory, TaskLock
    from statekeeper.worker.batch_claims import claim, is_claimed

    settings = services.settings

    def directory(run: TaskRun) -> TaskDirectory:
        return TaskDirectory(settings.state_dir, settings.application_id, run.task_id)

    warm: list[tuple[TaskRun, ParkedTask]] = []
    try:
        for run in (r for share in shares for r in share):
            path = directory(run).path
            if is_claimed(path, job):  # run by this worker's earlier Spark task of this pass
                continue
            parked = services.parked.take(str(path), topology.store_specs(run.subtopology))
            if parked is None:
                continue
            if run.executor not in (None, me) or parked.epoch != run.epoch:
                # The task moved since it ran here: this copy is stale. Closed without a
                # commit; if the task is placed here again, its open catches up from the
                # changelog (invariant 4: or rebuilds).
                stale[run.task_id] = (
                    f"task moved to executor {run.executor}"
                    if run.executor not in (None, me)
                    else f"placement epoch {parked.epoch} is older than {run.epoch}"
                )
                log.warning("task %s: stale copy closed here: %s", run.task_id, stale[run.task_id])
                parked.close()
                continue
            warm.append((run, parked))
            claim(path, job)
            # Every warm task's fetch runs now, so later tasks' records arrive while
            # the first ones process.
            parked.fetch = _fetch_for(run, services, parked.fetch)
    except BaseException:
        for _, taken in warm:  # give their locks back
            close_quietly(taken, f"task {taken.task_id}")
        raise
    results = _run_open_tasks(warm, topology, services, me)
    done = {run.task_id for run, _ in warm}
    share = take_share(index, shares, job, me, settings.state_dir, settings.application_id)
    for run in share:
        if run.task_id in done:
            continue
        task_dir = directory(run)
        deadline = time.monotonic() + CLAIM_GRACE_S
        while TaskLock(task_dir, 0).held_elsewhere() and time.monotonic() < deadline:
            if is_claimed(task_dir.path, job):
                break
            time.sleep(0.005)
        if is_claimed(task_dir.path, job):
            continue
        result = _run_one(run, topology, services, job, me)
        if result is not None:
            result.stale_copy = stale.get(run.task_id)
            results.append(result)
    return results


def _fetch_for(run: TaskRun, services: _WorkerServices, previous: Any | None) -> Any | None:
    """The run's records: from the parked fetch when it stopped where this run starts (they
    are mostly local by now), else from a new fetch."""
    from statekeeper.kafka.range_reader import RangeFetch

    if not run.ranges:  # a commit-only run (the app is stopping) reads nothing
        return previous
    if previous is not None:
        if previous.continue_with(run.ranges):
            return previous
        previous.close()
    return RangeFetch(
        services.consumer_conf, run.ranges, services.settings.broker_timeout_s, continuous=True
    )


def _run_one(
    run: TaskRun,
    topology: Any,
    services: _WorkerServices,
    job: str,
    me: str,
) -> TaskRunResult | None:
    """Open ``run``'s task (None if another worker claimed it for ``job`` meanwhile), run
    and commit it, and park it with its fetch."""
    from statekeeper.worker.batch_claims import claim, is_claimed

    started = time.perf_counter()
    # The fetch starts first: the broker and librdkafka's threads deliver the batch's
    # records while the stores open and check their changelogs.
    fetch = _fetch_for(run, services, None)
    try:
        # Invariant 4: a missing store comes from the newest verified snapshot + the tail.
        installer = services.snapshots.installer(run.task_id, run.partition)
        state = services.env.task(
            run.task_id,
            run.partition,
            topology.store_specs(run.subtopology),
            installer=installer,
            epoch=run.epoch,
        )
        services.progress.begin(state.task_dir.path)
        outcomes = state.open()
    except BaseException:
        # The open's error is what the caller sees; nothing here may replace it (a run with
        # nothing to read has no fetch).
        close_quietly(fetch, f"task {run.task_id}'s fetch")
        raise
    services.snapshots.watch(state)
    sources = {o.job.store.name: _restore_report(o, state) for o in outcomes}
    for store, report in sources.items():
        services.progress.note_source(store, report)
    if is_claimed(state.task_dir.path, job):  # its holder ran it while we waited
        if fetch is not None:
            fetch.close()
        services.parked.park(str(state.task_dir.path), _parked(run, state, None, services, me))
        return None
    claim(state.task_dir.path, job)
    opened = time.perf_counter() - started
    return _run_open_tasks(
        [(run, _parked(run, state, fetch, services, me))],
        topology,
        services,
        me,
        opened=(outcomes, opened),
    )[0]


def _parked(
    run: TaskRun, state: Any, fetch: Any | None, services: _WorkerServices, me: str
) -> ParkedTask:
    settings = services.settings
    check = still_placed_here(
        settings.state_dir, settings.application_id, run.task_id, me, run.epoch
    )
    return ParkedTask(state, fetch, epoch=run.epoch, still_placed_here=check)


def _run_open_tasks(
    tasks: list[tuple[TaskRun, ParkedTask]],
    topology: Any,
    services: _WorkerServices,
    me: str,
    opened: tuple[list[Any], float] | None = None,
) -> list[TaskRunResult]:
    """Process every task (parked ones, or the one task just opened: ``opened`` holds its
    restore outcomes and open time), then commit those due together in one group of
    transactions (:mod:`statekeeper.state.transaction`: one wait for their changelog records
    and outputs, one round trip for their markers; the broker acknowledges one task's records
    while the next one processes), then park them. Any failure closes every task not yet
    parked: its uncommitted writes are dropped and the next open reverts the changelog tail,
    so the batch runs again from the last commit."""
    from statekeeper.state.transaction import commit_group

    settings = services.settings
    done: list[tuple[TaskRun, ParkedTask, TaskRunResult, float]] = []
    for run, _task in tasks:
        if run.snapshot_request is not None:  # staged by the task's after-commit hook
            services.snapshots.arm(run.task_id, run.snapshot_request, run.snapshot_topology)
    try:
        for run, task in tasks:
            started = time.perf_counter()
            # The driver placed this run here under the task's epoch at `planned_at`.
            task.state.confirm_owner(run.planned_at)
            result = _process(run, topology, services, task.state, task.fetch)
            done.append((run, task, result, started))
        t0 = time.perf_counter()
        due = {
            id(task): transaction
            for run, task, _, _ in done
            if _commit_now(run, task.state, settings)
            and (transaction := task.state.pending_transaction()) is not None
        }
        if due:
            commit_group(list(due.values()), outputs=[services.outputs])  # waits for outputs
        else:
            # Outputs are acknowledged every batch, committed or not (R3, docs/invariants.md).
            services.outputs.flush(settings.broker_timeout_s * 2)
        commit_s = time.perf_counter() - t0
    except BaseException:
        for run, task in tasks:
            services.snapshots.disarm(run.task_id)
            close_quietly(task, f"task {run.task_id}")
        raise
    results = []
    outcomes, open_s = opened if opened else ([], 0.0)
    for _run, task, result, started in done:
        state = task.state
        result.committed = not state.has_uncommitted
        result.committed_batch_id = state.last_batch_id
        result.committed_offsets = state.committed_offsets
        result.warm = opened is None
        result.worker_pid = os.getpid()
        result.executor_id = me
        result.restored = [_restore_report(o, state) for o in outcomes]
        result.snapshots = services.snapshots.finish(state)
        result.store_entries_approx = {
            name: store.approximate_num_entries() for name, store in state.stores.items()
        }
        result.commit_ran = id(task) in due
        result.epoch = task.epoch
        fenced = state.drain_fenced()
        for kind, count in (
            ("changelog records", fenced.records),
            ("changelog markers", fenced.markers),
        ):
            if count:
                result.fenced[kind] = result.fenced.get(kind, 0) + count
        result.store_operations = {
            name: ops for name, store in state.stores.items() if (ops := store.metrics.drain())
        }
        services.parked.park(str(state.task_dir.path), task)
        result.seconds["open"] = open_s
        result.seconds["commit"] = commit_s  # shared by the tasks committed together
        result.seconds["total"] = time.perf_counter() - started + open_s
        result.seconds = {k: round(v, 4) for k, v in result.seconds.items()}
        results.append(result)
    return results


def close_quietly(resource: Any | None, what: str) -> None:
    """Close ``resource`` (None: nothing) while an error is already on its way: a failure
    here is logged, never raised, so it cannot mask the error that led to the cleanup."""
    if resource is None:
        return
    try:
        resource.close()
    except Exception:
        log.exception("closing %s after an error failed too", what)


def _commit_now(run: TaskRun, state: Any, settings: StatekeeperSettings) -> bool:
    return (
        run.force_commit
        or run.snapshot_request is not None
        or state.commit_due(settings.commit_interval_ms / 1000, settings.max_uncommitted_batches)
    )


def _offsets_after(processed: dict[str, int], ranges: tuple[OffsetRange, ...]) -> dict[str, int]:
    offsets = dict(processed)
    for r in ranges:
        key = tp_key(r.topic, r.partition)
        offsets[key] = max(offsets.get(key, 0), r.end)
    return offsets


def _process(
    run: TaskRun, topology: Any, services: _WorkerServices, state: Any, fetch: Any
) -> TaskRunResult:
    """Replay the backlog the state is missing, skip what it already holds and process the
    rest; the caller decides whether to commit."""
    result = TaskRunResult(run.task_id, run.batch_id, committed=False)
    result.records_replayed = _replay_backlog(run, topology, services, state)
    processed = state.processed_offsets
    _check_no_gap(run.batch_id, run.task_id, run.ranges, processed)
    if all(processed.get(tp_key(r.topic, r.partition), 0) >= r.end for r in run.ranges):
        # A re-run of a batch this task already holds: nothing to read.
        result.records_skipped = sum(r.count for r in run.ranges)
        return result
    timings = result.seconds
    t0 = time.perf_counter()
    records = fetch.read_runs()
    timings["read"] = time.perf_counter() - t0
    result.record_bytes_sampled = sampled_payload_bytes(records)
    result.rocksdb_memory = rocksdb_memory()
    t0 = time.perf_counter()
    # Records below the processed offsets (a partly committed re-run) are skipped here.
    batch = _stream_task(run, topology, services, state).process_batch(
        run.batch_id, run.batch_time_ms, records
    )
    state.mark_processed(run.batch_id, _offsets_after(processed, run.ranges))
    timings["process"] = time.perf_counter() - t0
    result.records_read = batch.records_read
    result.records_processed = batch.records_processed
    result.records_skipped = batch.records_skipped
    result.records_late_dropped = batch.records_late_dropped
    result.records_dlq = batch.records_dlq
    result.records_output = batch.records_output
    if batch.records_fenced:
        result.fenced["repartition records"] = batch.records_fenced
    return result


def _stream_task(run: TaskRun, topology: Any, services: _WorkerServices, state: Any) -> Any:
    from statekeeper.processing.stream_task import StreamTask

    return StreamTask(
        topology,
        run.subtopology,
        run.partition,
        state,
        services.outputs,
        services.settings.application_id,
    )


def _replay_backlog(run: TaskRun, topology: Any, services: _WorkerServices, state: Any) -> int:
    """Re-run, oldest first, the backlog batches holding records past the state's processed
    offsets (its worker died, or handed the task over, before committing them). Each runs
    with its own batch id, time and ranges, so it rewrites the same state and re-emits its
    outputs with the same dedupe ids (invariant 2, docs/invariants.md). Returns records
    processed."""
    from statekeeper.kafka.range_reader import read_range_runs

    replayed = 0
    for past in sorted(run.backlog, key=lambda b: b.batch_id):
        processed = state.processed_offsets
        if not any(
            (done := processed.get(tp_key(r.topic, r.partition))) is not None and done < r.end
            for r in past.ranges
        ):
            continue
        _check_no_gap(past.batch_id, run.task_id, past.ranges, processed)
        records = read_range_runs(
            services.consumer_conf, past.ranges, services.settings.broker_timeout_s
        )
        batch = _stream_task(run, topology, services, state).process_batch(
            past.batch_id, past.batch_time_ms, records
        )
        state.mark_processed(past.batch_id, _offsets_after(processed, past.ranges))
        replayed += batch.records_processed
    if replayed:
        log.warning(
            "task %s: replayed %d record(s) of uncommitted batches before batch %d",
            run.task_id,
            replayed,
            run.batch_id,
        )
    return replayed


def _check_no_gap(
    batch_id: int, tid: str, ranges: tuple[OffsetRange, ...], processed: dict[str, int]
) -> None:
    """A state whose processed offsets stop short of a batch's ranges would silently skip
    records: only a backlog that no longer reaches back far enough leads here."""
    for r in ranges:
        done = processed.get(tp_key(r.topic, r.partition))
        if done is not None and done < r.start:
            raise StatekeeperError(
                f"task {tid}: its state ends at offset {done} of "
                f"{r.topic}[{r.partition}] but batch {batch_id} starts at {r.start}, and "
                "the batches between are not in the backlog (were max_uncommitted_batches or "
                "spark.sql.streaming.minBatchesToRetain lowered, or the checkpoint deleted?)"
            )


def _restore_report(outcome: Any, state: Any) -> dict[str, Any]:
    """How one store of a just opened task got its state (``source``: see
    :func:`~statekeeper.worker.task_snapshots.restore_source`)."""
    from statekeeper.worker.task_snapshots import restore_source

    name = outcome.job.store.name
    spec = next((s for s in state.specs if s.name == name), None)
    return {
        "store": name,
        "full": outcome.full,
        "reason": outcome.job.reason,
        "start_offset": outcome.start_offset,
        "records": outcome.restored_records,
        "seconds": round(outcome.seconds, 4),
        **restore_source(outcome, spec, state.installs.get(name)),
    }


def settings_to_json(settings: StatekeeperSettings) -> str:
    """Settings as the JSON string executors rebuild them from (stable, cache key)."""
    return json.dumps(json.loads(settings.model_dump_json()), sort_keys=True)
