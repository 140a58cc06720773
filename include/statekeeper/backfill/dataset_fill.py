"""``statekeeper backfill --input PATH``: a fresh app's state from a dataset of historical
records (:mod:`statekeeper.backfill.dataset`), for history the topics no longer retain.

The app's own topology runs over the dataset in batch, one stage per subtopology in
topological order and one task per stream task (on Spark: one Spark task each; ``--local``:
one after the other in this process):

- a stateful task processes its records through the app's own stores, so its changelogs are
  written, then commits at batch 0 with its source offsets at the **takeover offsets** (below)
  and, for a repartition topic it reads, at that topic's end; then it is snapshotted;
- its repartition records go to the next stage's tasks in memory (the key's murmur2
  partition, as the app's producer places them), not through the topic; output topics are
  not written (the history's outputs were produced when it was live);
- a stateless task runs in a sandbox only for its repartition records.

Where the stream takes over, per source partition: after the dataset's highest offset when
it has an ``offset`` column (it must reach the topic's log start, so no record is in neither,
and not pass its end), else at the log start (the dataset is the history before it). The
takeover record (:mod:`statekeeper.versions.takeover`, ``batch_base`` 1) starts the next run
there: ``statekeeper backfill`` (the retained range) or ``statekeeper app run``.

Only a fresh app (no state, no changelog records, no Spark checkpoint) takes a dataset.
Crash-safe: the takeover record is written as pending before any task; a task that
committed is left as it is when the command runs again (its repartition records are made
again in a sandbox); one that did not is reverted by its next open and filled again.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.backfill.dataset import DatasetShape, Routing
from statekeeper.errors import ConfigError
from statekeeper.kafka.model import KafkaRecord, tp_key
from statekeeper.kafka.partitioning import partition_for_key
from statekeeper.processing.sandbox_run import run_in_sandbox
from statekeeper.processing.stream_task import StreamTask
from statekeeper.state.environment import StateEnvironment
from statekeeper.state.task_id import TaskId

#: Records per micro-batch of a task's processing (bounds the uncommitted cache).
CHUNK = 100_000
#: The batch id every filled task commits at; the stream's batches start above it.
FILL_BATCH = 0

#: A record with the key it is ordered by within its partition.
Sorted = tuple[tuple[int, int], KafkaRecord]


@dataclass(frozen=True)
class DatasetJob:
    """What every task of a dataset backfill needs; picklable (it travels to executors)."""

    settings: Any
    topology: Any
    shape: DatasetShape
    routing: Routing
    takeover_offsets: dict[str, int]  # source ``topic:partition`` -> offset
    repartition_ends: dict[str, int]  # repartition ``topic:partition`` -> offset
    partitions: dict[str, int]  # every topic of the app -> partitions
    tasks: dict[int, int]  # subtopology -> tasks
    fingerprint: dict[str, Any] | None = None
    snapshot: bool = True

    @property
    def app(self) -> str:
        return str(self.settings.application_id)

    def commit_offsets(self, subtopology: int, partition: int) -> dict[str, int]:
        """Where a task's markers say it stands: the takeover offsets of its sources, the
        ends of the repartition topics it reads."""
        found = {}
        for topic in self.topology.subtopology_topics(self.app, subtopology):
            tp = tp_key(topic, partition)
            found[tp] = self.takeover_offsets.get(tp, self.repartition_ends.get(tp, 0))
        return found

    def offset_topics(self) -> frozenset[str]:
        """Source topics whose records carry the dataset's offsets (none without an
        ``offset`` column); repartition records are numbered in memory."""
        return frozenset(self.routing.partitions) if self.shape.has_offset else frozenset()

    def repartition_partitions(self) -> dict[str, int]:
        internal = set(self.topology.internal_topics(self.app))
        return {t: n for t, n in self.partitions.items() if t in internal}


@dataclass
class DatasetTaskFill:
    """One task: records it processed (and duplicates of an offset dropped), entries per
    store, its repartition records, snapshots, and a note when it was left as it was."""

    task_id: str
    records: int = 0
    duplicates: int = 0
    entries_approx: dict[str, int] = field(default_factory=dict)  # RocksDB's estimate
    repartitioned: int = 0
    snapshots: list[str] = field(default_factory=list)
    note: str | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task_id,
            "records": self.records,
            "duplicates": self.duplicates,
            "entries_approx": dict(sorted(self.entries_approx.items())),
            "repartitioned": self.repartitioned,
            "snapshots": list(self.snapshots),
            "note": self.note,
            "seconds": round(self.seconds, 3),
        }


class _Capture:
    """A stream task's emitter that keeps repartition records (routed as the app's producer
    routes them) and counts the rest."""

    def __init__(self, partitions: dict[str, int], task_rank: int) -> None:
        self.partitions = partitions
        self.rank = task_rank
        self.records: list[Sorted] = []
        self.dropped = 0

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Any = None,
        timestamp_ms: int | None = None,
        partition: int | None = None,
    ) -> None:
        count = self.partitions.get(topic)
        if count is None:
            self.dropped += 1
            return
        seq = len(self.records)
        if partition is None:
            partition = partition_for_key(key, count) if key is not None else seq % count
        # No statekeeper headers: a downstream task applies it without dedupe bookkeeping.
        record = KafkaRecord(topic, partition, 0, timestamp_ms or 0, key, value)
        self.records.append(((self.rank, seq), record))


def stage_order(topology: Any, app: str) -> list[int]:
    """Subtopologies so that each comes after those writing the repartition topics it reads;
    a ConfigError for a cycle."""
    writers = {
        ref.resolve(app): sub.id
        for sub in topology.subtopologies
        for ref in sub.sink_refs
        if ref.repartition
    }
    order: list[int] = []
    pending = [sub.id for sub in topology.subtopologies]
    while pending:
        ready = [
            s
            for s in pending
            if all(
                writers.get(t) in (None, *order) or writers.get(t) == s
                for t in topology.subtopology_topics(app, s)
            )
        ]
        if not ready:
            raise ConfigError(f"subtopologies {pending} read each other's repartition topics")
        order += ready
        pending = [s for s in pending if s not in ready]
    return order


def ordered(
    records: Iterable[Sorted], offset_topics: frozenset[str]
) -> tuple[dict[str, list[KafkaRecord]], int]:
    """A task's records per ``topic:partition`` in processing order, and the duplicates
    dropped: by the dataset's offsets for ``offset_topics`` (a repeated offset is kept
    once), else by the order key, numbered in that order."""
    by_tp: dict[str, list[Sorted]] = {}
    for item in records:
        by_tp.setdefault(tp_key(item[1].topic, item[1].partition), []).append(item)
    out: dict[str, list[KafkaRecord]] = {}
    duplicates = 0
    for tp, items in by_tp.items():
        if items[0][1].topic in offset_topics:
            items.sort(key=lambda i: (i[1].offset, i[0]))
            kept = [
                r for n, (_, r) in enumerate(items) if n == 0 or items[n - 1][1].offset != r.offset
            ]
            duplicates += len(items) - len(kept)
            out[tp] = kept
        else:
            items.sort(key=lambda i: i[0])
            out[tp] = [r._replace(offset=n) for n, (_, r) in enumerate(items)]
    return out, duplicates


def fill_task(
    job: DatasetJob, env: StateEnvironment, task_id: str, records: dict[str, list[KafkaRecord]]
) -> tuple[DatasetTaskFill, list[Sorted]]:
    """Fill one task from its records (module docstring); its repartition records."""
    started = time.perf_counter()
    tid = TaskId.parse(task_id)
    result = DatasetTaskFill(task_id, records=sum(len(r) for r in records.values()))
    capture = _Capture(job.repartition_partitions(), tid.partition)
    specs = job.topology.store_specs(tid.subtopology)
    offsets = job.commit_offsets(tid.subtopology, tid.partition)
    state = env.task(task_id, tid.partition, specs) if specs else None
    if state is not None:
        state.open()
    try:
        done = state is not None and (state.last_batch_id, state.committed_offsets) == (
            FILL_BATCH,
            offsets,
        )
        if state is not None and not done:
            if state.last_batch_id is not None and state.last_batch_id >= 0:
                raise ConfigError(
                    f"task {task_id} of {job.app} has committed state (batch "
                    f"{state.last_batch_id}) that is not this backfill's: a dataset backfill "
                    "writes a fresh app's first state"
                )
            _process(job, state, tid, records, capture)
            state.commit(FILL_BATCH, offsets)
            result.entries_approx = {
                s.name: state.store(s.name).approximate_num_entries() for s in specs
            }
            if job.snapshot:
                from statekeeper.snapshots.create import snapshot_now

                result.snapshots = snapshot_now(job.settings, state, topology=job.fingerprint)
        elif capture.partitions and any(
            ref.repartition for ref in job.topology.subtopology(tid.subtopology).sink_refs
        ):
            # Stateless, or filled by an earlier run: its repartition records only.
            result.note = "filled already: left as it is" if done else "stateless"
            with tempfile.TemporaryDirectory(prefix="statekeeper-dataset-") as sandbox:
                run_in_sandbox(
                    job.settings,
                    job.topology,
                    task_id,
                    tid.subtopology,
                    tid.partition,
                    specs,
                    records,
                    Path(sandbox),
                    lambda _state: None,
                    batch_id=FILL_BATCH,
                    emitter=capture,
                )
        else:
            result.note = "filled already: left as it is" if done else "stateless, no output kept"
    finally:
        if state is not None:
            state.close()
    result.repartitioned = len(capture.records)
    result.seconds = time.perf_counter() - started
    return result, capture.records


def _process(
    job: DatasetJob,
    state: Any,
    tid: TaskId,
    records: dict[str, list[KafkaRecord]],
    emitter: _Capture,
) -> None:
    # Record at a time, as the sandbox re-run of a filled task is: its repartition records
    # do not depend on where the chunks are cut, so a re-run feeds the next stage the same.
    stream = StreamTask(
        job.topology, tid.subtopology, tid.partition, state, emitter, job.app, vectorize=False
    )
    try:
        for chunk in _chunks(records):
            batch_time = max((r[-1].timestamp_ms for r in chunk.values() if r), default=0)
            stream.process_batch(FILL_BATCH, batch_time, chunk)
    finally:
        stream.close()


def _chunks(records: dict[str, list[KafkaRecord]]) -> Iterator[dict[str, list[KafkaRecord]]]:
    """One partition's records in slices of CHUNK; several partitions (a task reading two
    topics, merged by timestamp) at once."""
    if len(records) != 1:
        yield records
        return
    ((tp, recs),) = records.items()
    for start in range(0, len(recs), CHUNK):
        yield {tp: recs[start : start + CHUNK]}


# -- the stages --------------------------------------------------------------------------

Progress = Callable[[DatasetTaskFill], None]


def run_stages_locally(
    job: DatasetJob, source: Iterable[Sorted], progress: Progress | None = None
) -> list[DatasetTaskFill]:
    """Every stage's tasks one after the other in this process."""
    inputs: dict[int, list[Sorted]] = {}  # partition -> records of the current stage's topics
    pending: list[Sorted] = list(source)
    fills: list[DatasetTaskFill] = []
    env = StateEnvironment(job.settings)
    try:
        for sub in stage_order(job.topology, job.app):
            topics = set(job.topology.subtopology_topics(job.app, sub))
            inputs = {}
            for item in pending:
                if item[1].topic in topics:
                    inputs.setdefault(item[1].partition, []).append(item)
            pending = [item for item in pending if item[1].topic not in topics]
            for p in range(job.tasks[sub]):
                records, duplicates = ordered(inputs.get(p, []), job.offset_topics())
                fill, out = fill_task(job, env, str(TaskId(sub, p)), records)
                fill.duplicates = duplicates
                fills.append(fill)
                pending += out
                if progress is not None:
                    progress(fill)
    finally:
        env.close()
    return fills


def run_stages_on_spark(
    job: DatasetJob, source: Any, progress: Progress | None = None
) -> list[DatasetTaskFill]:
    """Every stage on Spark: ``source``, an RDD of :data:`Sorted` records, is partitioned by
    source partition, one Spark task per stream task; a stage's repartition records are
    the next stage's input."""
    fills: list[DatasetTaskFill] = []
    pending = source
    persisted = [source]
    for sub in stage_order(job.topology, job.app):
        topics = set(job.topology.subtopology_topics(job.app, sub))
        mine = pending.filter(lambda item, t=topics: item[1].topic in t)
        rest = pending.filter(lambda item, t=topics: item[1].topic not in t)
        tasks = job.tasks[sub]
        stage = (
            mine.map(lambda item: (item[1].partition, item))
            .partitionBy(tasks, lambda p: p)
            .mapPartitionsWithIndex(lambda index, items, s=sub: _spark_task(job, s, index, items))
            .persist()
        )
        for fill in sorted(
            (x for tag, x in stage.filter(lambda kv: kv[0] == "fill").collect()),
            key=lambda f: TaskId.parse(f.task_id),
        ):
            fills.append(fill)
            if progress is not None:
                progress(fill)
        persisted.append(stage)
        pending = rest.union(stage.filter(lambda kv: kv[0] == "out").map(lambda kv: kv[1]))
    for rdd in persisted:
        rdd.unpersist()
    return fills


def _spark_task(
    job: DatasetJob, sub: int, partition: int, items: Iterable[tuple[int, Sorted]]
) -> Iterator[tuple[str, Any]]:
    records, duplicates = ordered((item for _, item in items), job.offset_topics())
    env = StateEnvironment(job.settings)
    try:
        fill, out = fill_task(job, env, str(TaskId(sub, partition)), records)
    finally:
        env.close()
    fill.duplicates = duplicates
    yield "fill", fill
    for item in out:
        yield "out", item
