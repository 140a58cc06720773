"""``statekeeper backfill --input PATH``: the checks, the takeover and the run around
:mod:`statekeeper.backfill.dataset_fill`.

:func:`prepare_dataset_backfill` reads the dataset's schema and scans its records (per
source partition: records and highest offset), decides where the stream takes over and
refuses whatever the backfill cannot do, before anything is written: the app running, an
app that is not fresh, a dataset that leaves a gap before the topic's log start or passes
its end, windows without a ``timestamp`` column. :func:`run_dataset_backfill` then records
the takeover as pending, creates the app's topics, fills every task stage by stage, records
the app's fingerprint and the final takeover.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.backfill.dataset import (
    DOCS,
    DatasetError,
    DatasetShape,
    Routing,
    dataset_format,
    read_local,
)
from statekeeper.backfill.dataset_fill import (
    FILL_BATCH,
    DatasetJob,
    DatasetTaskFill,
    Progress,
    Sorted,
    run_stages_locally,
    run_stages_on_spark,
)
from statekeeper.errors import ConfigError
from statekeeper.kafka.model import tp_key
from statekeeper.versions.recorded import state_root
from statekeeper.versions.takeover import Takeover, read_takeover, takeover_path, write_takeover


def takeover_offsets(
    shape: DatasetShape,
    stats: dict[str, tuple[int, int | None]],
    log_starts: dict[str, int],
    log_ends: dict[str, int],
) -> dict[str, int]:
    """Where the stream takes over per source ``topic:partition`` (module docstring);
    ``stats``: per partition, the dataset's records and highest offset. A DatasetError when
    the dataset and the topic leave a gap between them, or the dataset passes the log end."""
    found: dict[str, int] = {}
    for tp, start in sorted(log_starts.items()):
        count, highest = stats.get(tp, (0, None))
        if not shape.has_offset:
            found[tp] = start
            continue
        after = 0 if highest is None else highest + 1
        if after < start:
            raise DatasetError(
                f"--input {shape.path}: {tp} ends at offset {after} in the dataset but the "
                f"topic's log starts at {start}: records {after}..{start - 1} are in neither "
                f"({DOCS})"
            )
        if after > log_ends[tp]:
            raise DatasetError(
                f"--input {shape.path}: {tp} has offset {highest} in the dataset but the "
                f"topic ends at {log_ends[tp]}: not this topic's records ({DOCS})"
            )
        found[tp] = after
    return found


def takeover_record(job: DatasetJob, *, pending: bool) -> Takeover:
    """The takeover the stream starts with after the fill (``batch_base`` above the fill's
    batch; the source subtopologies' floors at the takeover offsets)."""
    starts: dict[str, dict[int, int]] = {}
    for tp, offset in job.takeover_offsets.items():
        topic, _, p = tp.rpartition(":")
        starts.setdefault(topic, {})[int(p)] = offset
    floors = {
        sub.id: {
            t: dict(starts[t])
            for t in job.topology.subtopology_topics(job.app, sub.id)
            if t in starts
        }
        for sub in job.topology.subtopologies
    }
    extra: dict[str, Any] = {"dataset": job.shape.path}
    if pending:
        extra["pending"] = "a dataset backfill (statekeeper backfill --input) is writing it"
    return Takeover(
        from_application_id=f"dataset {job.shape.path}",
        batch_base=FILL_BATCH + 1,
        start_offsets=starts,
        floors={s: f for s, f in floors.items() if f},
        notes=(f"state backfilled from the dataset {job.shape.path}",),
        planned_at_ms=int(time.time() * 1000),
        extra=extra,
    )


def write_record(job: DatasetJob, root: Path, *, pending: bool) -> None:
    write_takeover(takeover_path(root), takeover_record(job, pending=pending))


@dataclass
class PreparedDatasetBackfill:
    """Everything decided before a task is written: the job and the dataset's records
    (a list here, an RDD on Spark)."""

    job: DatasetJob
    source: Any
    records: int
    on_spark: bool
    notes: list[str] = field(default_factory=list)


@dataclass
class DatasetBackfillReport:
    """What the backfill did, per task, and where the stream takes over."""

    application_id: str
    dataset: str
    records: int
    on_spark: bool
    takeover_offsets: dict[str, int]
    tasks: list[DatasetTaskFill] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "application_id": self.application_id,
            "dataset": self.dataset,
            "records": self.records,
            "on_spark": self.on_spark,
            "takeover_offsets": dict(sorted(self.takeover_offsets.items())),
            "tasks": [t.as_dict() for t in self.tasks],
            "notes": list(self.notes),
            "seconds": round(self.seconds, 3),
        }

    def text(self) -> str:
        lines = [
            f"backfill {self.application_id} from {self.dataset}: {self.records:,} records "
            f"{'on Spark' if self.on_spark else 'in this process'} in {self.seconds:.1f} s"
        ]
        for t in self.tasks:
            entries = ", ".join(f"{k} ~{v:,}" for k, v in sorted(t.entries_approx.items()))
            lines.append(
                f"  task {t.task_id}: {t.note or f'{t.records:,} records; entries: {entries}'}"
                + (f"; {t.duplicates} repeated offsets dropped" if t.duplicates else "")
            )
        starts = ", ".join(f"{tp} {o}" for tp, o in sorted(self.takeover_offsets.items()))
        lines.append(f"the stream takes over at {starts}")
        lines += [f"note: {n}" for n in self.notes]
        lines.append(
            "next: statekeeper backfill --app SPEC (the topics' retained records) or "
            "statekeeper app run"
        )
        return "\n".join(lines)


def prepare_dataset_backfill(
    spec: Any,
    settings: Any,
    path: Path,
    *,
    spark: Any = None,
    snapshot: bool = True,
) -> PreparedDatasetBackfill:
    """Check and decide (module docstring); a ConfigError (one line) for what is refused.
    ``spark``: a SparkSession to read and fill on (None: this process)."""
    from statekeeper.app.topics import source_partitions, task_plan
    from statekeeper.backfill.run import changelog_records
    from statekeeper.kafka.adapter import consumer_config
    from statekeeper.kafka.admin import make_admin, wait_for_broker
    from statekeeper.kafka.offsets import log_end_offsets, log_start_offsets
    from statekeeper.ops.snapshot_app import running_app_status_url
    from statekeeper.versions.fingerprint import fingerprint_of

    dataset_format(Path(path))  # a missing or unknown input fails before the broker is asked
    path = Path(path).resolve()  # recorded in the takeover: a re-run names it the same
    app_id = settings.application_id
    url = running_app_status_url(settings)
    if url is not None:
        raise ConfigError(f"app {app_id} is running ({url}): stop it before a backfill")
    topology = spec.build_topology()
    timeout = settings.broker_timeout_s
    wait_for_broker(settings.bootstrap_servers, timeout)
    admin = make_admin(settings.bootstrap_servers)
    sources = source_partitions(admin, topology, app_id, timeout)
    plan = task_plan(topology, app_id, sources)
    conf = consumer_config(settings.bootstrap_servers, group_id=f"{app_id}-backfill")
    root = state_root(settings.state_dir, app_id)
    changelogs = changelog_records(admin, conf, topology, app_id, timeout)
    _check_fresh(settings, topology, root, changelogs, Path(path))

    routing = Routing(dict(sources))
    if spark is not None:
        shape, source, stats = _scan_on_spark(spark, Path(path), routing)
    else:
        shape, source, stats = _scan_locally(Path(path), routing)
    if not shape.has_timestamp and _has_windows(topology):
        raise DatasetError(
            f"--input {path}: no timestamp column, and the app has window stores (their "
            f"windows come from record times; {DOCS})"
        )
    tps = [(t, p) for t, n in sorted(sources.items()) for p in range(n)]
    starts = {tp_key(*tp): o for tp, o in log_start_offsets(conf, tps, timeout).items()}
    ends = {tp_key(*tp): o for tp, o in log_end_offsets(conf, tps, timeout).items()}
    internal = [(t, p) for t in topology.internal_topics(app_id) for p in range(plan.partitions[t])]
    existing = [tp for tp in internal if tp[0] in _existing(admin, internal, timeout)]
    repartition_ends = {
        tp_key(*tp): o
        for tp, o in (log_end_offsets(conf, existing, timeout) if existing else {}).items()
    }
    job = DatasetJob(
        settings=settings,
        topology=topology,
        shape=shape,
        routing=routing,
        takeover_offsets=takeover_offsets(shape, stats, starts, ends),
        repartition_ends=repartition_ends,
        partitions=dict(plan.partitions),
        tasks=dict(Counter(sub for sub, _ in plan.tasks)),
        fingerprint=fingerprint_of(topology, app_id, dict(sources)).to_dict(),
        snapshot=snapshot,
    )
    notes = []
    if shape.ignored:
        notes.append(f"columns not read: {', '.join(shape.ignored)}")
    if not shape.has_offset:
        notes.append("no offset column: records in dataset order, the stream from the log start")
    if not shape.has_timestamp:
        notes.append("no timestamp column: every record at time 0")
    records = sum(count for count, _ in stats.values())
    return PreparedDatasetBackfill(job, source, records, spark is not None, notes)


def run_dataset_backfill(
    prepared: PreparedDatasetBackfill, progress: Progress | None = None
) -> DatasetBackfillReport:
    """Fill every task (module docstring); the report."""
    from statekeeper.app.topics import prepare_topics
    from statekeeper.kafka.admin import make_admin
    from statekeeper.versions.fingerprint import TopologyFingerprint
    from statekeeper.versions.recorded import write_recorded

    started = time.perf_counter()
    job = prepared.job
    settings = job.settings
    root = state_root(settings.state_dir, job.app)
    write_takeover(takeover_path(root), takeover_record(job, pending=True))
    prepare_topics(
        make_admin(settings.bootstrap_servers),
        job.topology,
        job.app,
        settings.broker_timeout_s,
        dict(job.routing.partitions),
    )
    if prepared.on_spark:
        fills = run_stages_on_spark(job, prepared.source, progress)
    else:
        fills = run_stages_locally(job, prepared.source, progress)
    assert job.fingerprint is not None
    write_recorded(root, TopologyFingerprint.from_dict(job.fingerprint))
    write_takeover(takeover_path(root), takeover_record(job, pending=False))
    return DatasetBackfillReport(
        job.app,
        job.shape.path,
        prepared.records,
        prepared.on_spark,
        dict(job.takeover_offsets),
        fills,
        list(prepared.notes),
        time.perf_counter() - started,
    )


def _check_fresh(
    settings: Any, topology: Any, root: Path, changelogs: dict[str, int], path: Path
) -> None:
    """Only a fresh app takes a dataset, or one that a backfill from the same dataset which
    did not finish left (its pending takeover record: the run goes on)."""
    from statekeeper.backfill.start import read_history

    own = read_takeover(takeover_path(root))
    if own is not None and "dataset" in own.extra and own.extra.get("pending"):
        if own.extra["dataset"] != str(path):
            raise ConfigError(
                f"backfill --input: a backfill of app {settings.application_id} from "
                f"{own.extra['dataset']} did not finish: run it again with that dataset, or "
                "delete the app's state and changelogs to start over"
            )
        return
    history = read_history(settings, topology, settings.checkpoint_path(), changelogs)
    reasons = [
        own is not None and f"it took over from {own.from_application_id} ({takeover_path(root)})",
        history.recorded is not None and f"its query started already ({history.checkpoint})",
        history.logged_batches and f"its Spark checkpoint {history.checkpoint} has micro-batches",
        history.committed_state,
    ]
    why = next((r for r in reasons if r), None)
    if why:
        raise ConfigError(
            f"backfill --input: app {settings.application_id} is not fresh: {why}. A dataset "
            f"is the history before everything the app processed: give a new application id "
            f"({DOCS})"
        )


Stats = dict[str, tuple[int, int | None]]


def _scan_locally(path: Path, routing: Routing) -> tuple[DatasetShape, list[Sorted], Stats]:
    shape, rows = read_local(path)
    records: list[Sorted] = []
    stats: Stats = {}
    for position, row in enumerate(rows):
        record = routing.record(row, position)
        records.append(((0, position), record))
        tp = tp_key(record.topic, record.partition)
        count, highest = stats.get(tp, (0, None))
        if shape.has_offset and (highest is None or record.offset > highest):
            highest = record.offset
        stats[tp] = (count + 1, highest)
    return shape, records, stats


def _scan_on_spark(spark: Any, path: Path, routing: Routing) -> tuple[DatasetShape, Any, Stats]:
    from pyspark.sql import functions as F  # noqa: N812

    from statekeeper.backfill.dataset import COLUMNS, shape_of

    fmt = dataset_format(path)
    reader = spark.read.option("recursiveFileLookup", "true")
    frame = reader.parquet(str(path)) if fmt == "parquet" else reader.json(str(path))
    kinds = {f.name: _spark_kind(f.dataType) for f in frame.schema.fields}
    shape = shape_of(path, fmt, list(frame.columns), kinds)
    if kinds.get("timestamp") == "timestamp":  # epoch ms, whatever the session's time zone
        ms = (F.col("timestamp").cast("double") * 1000).cast("long")
        frame = frame.withColumn("timestamp", ms)
    columns = [c for c in COLUMNS if c in frame.columns]
    frame = frame.select(*columns).withColumn("_position", F.monotonically_increasing_id())

    def to_record(row: Any) -> Sorted:
        data = row.asDict()
        position = data.pop("_position")
        return (0, position), routing.record(data, position)

    source = frame.rdd.map(to_record).persist()
    with_offsets = shape.has_offset

    def stat(item: Sorted) -> tuple[str, tuple[int, int | None]]:
        record = item[1]
        return tp_key(record.topic, record.partition), (
            1,
            record.offset if with_offsets else None,
        )

    def merge(a: tuple[int, int | None], b: tuple[int, int | None]) -> tuple[int, int | None]:
        highest = None if a[1] is None or b[1] is None else max(a[1], b[1])
        return a[0] + b[0], highest

    try:
        stats = dict(source.map(stat).reduceByKey(merge).collect())
    except Exception as exc:  # a row's error, raised in a Python worker, comes back wrapped
        raise _row_error(exc) or exc from None
    return shape, source, stats


def _row_error(exc: Exception) -> DatasetError | None:
    """The DatasetError a Spark task raised, as one line (None: another failure)."""
    marker = f"{DatasetError.__name__}: "
    for line in str(exc).splitlines():
        if marker in line:
            return DatasetError(line.split(marker, 1)[1].strip())
    return None


def _spark_kind(kind: Any) -> str:
    name = kind.typeName()
    ints = {"long", "integer", "short", "byte"}
    named = {"binary": "binary", "string": "string", "void": "null", "timestamp_ntz": "timestamp"}
    return "int" if name in ints else named.get(name, name)


def _has_windows(topology: Any) -> bool:
    return any(
        s.kind == "window" for sub in topology.subtopologies for s in topology.store_specs(sub.id)
    )


def _existing(admin: Any, tps: list[tuple[str, int]], timeout: float) -> set[str]:
    from statekeeper.kafka.admin import partition_count

    return {t for t in {t for t, _ in tps} if partition_count(admin, t, timeout)}
