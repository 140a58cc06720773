"""Upgrade benchmark: migrating an app's state to a new version vs restoring or rebuilding it.

One run, on the embedded broker (127.0.0.1) and one machine. The old version (v1, counts by
key as int; ``upgrade_topology.py``) builds its state from an input topic of ``--keys``
distinct keys (one record each) in ``--partitions`` partitions (16 tasks by default): it
runs in this process through the executors' task runner
(``statekeeper.worker.task_runner.run_share``, the path a Spark task takes, without Spark),
is stopped after that history and snapshotted (``statekeeper snapshot create`` of a stopped
app: ``ops.snapshot_app``; an in-app request snapshots at most ~5 tasks per worker process,
its upload queue drops the rest), then started again for a tail of ``--tail`` updates to
existing keys (the changelog tail after the snapshot). The bench plays the app's driver: it
logs each micro-batch in the app's Spark checkpoint as Spark does (``offsets/<n>``,
``commits/<n>``), where the migration reads where the old version's last micro-batch ended.
Then, side by side on that state:

  migration, from snapshot   ``upgrade migrate --local`` through the library
                             (``prepare_migration`` + ``run_migration`` without Spark) to v2
                             (the count as ``{"count": n}``, a per-record migration, a new
                             application id): newest snapshot + changelog tail read, every
                             key migrated, written to v2's stores and changelogs, committed,
                             snapshotted (the command's default)
  migration, from changelog  the same with the old snapshots out of reach (the old settings'
                             snapshot_url points at an empty folder): the whole changelog
  full changelog restore     v1's tasks restored from their changelogs alone into an empty
                             state directory (``statekeeper restore --from-snapshot none``'s
                             path: ``ops.restore.restore_task``), run before and after the
                             migrations; keys/s against the mean of the two
  snapshot + tail restore    the same from the newest snapshot (for reference)
  reprocess (stream only)    the alternative without migration: v2 under another new
                             application id rebuilds the state by reprocessing the input from
                             the earliest offset, through the same in-process task runner,
                             in micro-batches of ``max_records_per_batch``; ``--reprocess-
                             records`` measures a prefix and extrapolates to the whole input

  migration on Spark         both migrations again with this process's Spark session on
                             local[2] (``upgrade migrate`` without ``--local``: one Spark task
                             per stream task, two at a time), the session started before

The migrated states (all four) are compared with v1's and the reprocessed one (key count,
total and a digest over every entry). The restore and the reprocessing run their tasks one
after another in one Python thread, like ``--local``; the migration on Spark uses both cores.

Then, in the same run, the apps as processes on Spark local[2] (``statekeeper app run``'s
launcher, each its own driver and JVM):

  cut-over       v1 (``--cutover-keys`` keys in ``--cutover-partitions`` partitions) runs
                 under live input (``--cutover-rate`` records/s to existing keys); then
                 ``upgrade cutover --stop-old`` through the library (``statekeeper.upgrade.
                 cutover.cutover``; its stop, migration and verification timed where it
                 calls them), once per ``--cutover-modes`` (``spark``: the migration on a
                 Spark session made just before, as the command makes its own; ``local``:
                 ``--local``), each on its own v1; v2 is launched as soon as it returns. The
                 downtime runs from the old version's SIGTERM to v2's first micro-batch in
                 its Spark checkpoint's ``commits/`` (the file's time). v2 then drains the
                 input and stops; its counts must equal the bench's own count of the input.
  shadow         (``--cutover-modes`` ``shadow``) the blue/green cut-over on its own v1
                 under the same live input: v1 keeps running while its state is migrated
                 into v2 (``statekeeper.upgrade.shadow.migrate_beside``, ``upgrade migrate
                 --local``; exact beside a running v1: no repartition topic), v2 is launched
                 beside it (takes over at the migration, catches up); with ``--shadow-diff``
                 (default) the input is paused until both are aligned
                 (``shadow.wait_aligned``), ``upgrade diff`` runs (``diff_versions``) and the
                 input resumes; then ``upgrade cutover --shadow --stop-old``
                 (``cutover(shadow=True)``, its stop timed). Downtime: v1's SIGTERM to v2's
                 next ``commits/`` entry; v2's start, catch-up and the diff are reported as
                 context. v2 drains and stops; its counts must equal the input's.
                 ``cutover_downtime_s``: the best path's downtime (``cutover_downtime_path``).
  stream only    (the first stop-then-migrate mode's run) the alternative without a
                 migration: v2 under a new id from the earliest offset; its downtime is the
                 old version's stop plus its launch until its committed micro-batches reach
                 where v1 stopped.
  backfill       a history of ``--backfill-records`` records (random keys of
                 ``--backfill-keys``, empty values) in ``--backfill-partitions``
                 partitions; ``statekeeper backfill --app SPEC --json`` in its own process
                 (``prepare_backfill`` + ``run_backfill`` on the app's Spark, local[2]) from
                 earliest to now, its records/s the report's; against plain
                 confluent-kafka Consumers counting the same records (2 in 2 processes, the
                 2-core peer, before and after; 1 process; 2 with librdkafka's default
                 fetch settings); and against the stream-only alternative, the same app
                 under a new id from the earliest offset (``app run --stop-when-idle``).
                 Both states must equal the bench's own count of the input.

Prints one JSON object (progress on stderr) and writes it to ``--output`` (default
``benchmarks/results/upgrade-<time>.json``). Usage: python benchmarks/upgrade_bench.py
[--keys N] [--tail T] [--partitions P] [--reprocess-records M] [--backfill-records R]
[--cutover-keys K] [--cutover-modes spark,local,shadow] [--no-shadow-diff] (a quick run:
--keys 100000 --backfill-records 200000 --cutover-keys 20000)
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import multiprocessing
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from datetime import datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Producer

from statekeeper.app.child_process import child_env
from statekeeper.app.spec import AppSpec, load_app_spec
from statekeeper.app.topics import prepare_topics
from statekeeper.kafka.adapter import READ_TO_EOF_PREFETCH, producer_config
from statekeeper.kafka.admin import ensure_topic, make_admin
from statekeeper.kafka.embedded import EmbeddedBroker
from statekeeper.kafka.model import OffsetRange
from statekeeper.migration import prepare_migration, run_migration
from statekeeper.ops.restore import LATEST, NONE, restore_task
from statekeeper.ops.snapshot_app import snapshot_app
from statekeeper.settings import StatekeeperSettings, load_settings
from statekeeper.snapshots import SnapshotStorage
from statekeeper.spark.checkpoint_log import last_committed_batch, last_committed_positions
from statekeeper.spark.session_env import batch_session
from statekeeper.state.environment import StateEnvironment
from statekeeper.testing.app_process import AppProcess
from statekeeper.versions import fingerprint_of, write_recorded
from statekeeper.versions.recorded import state_root
from statekeeper.worker.task_run import TaskRun, TaskRunResult
from statekeeper.worker.task_runner import (
    close_worker_services,
    run_share,
    settings_to_json,
)

#: The cut-over paths (``--cutover-modes``).
CUTOVER_PATHS = {
    "spark": "stop then migrate: upgrade cutover --stop-old, the migration on Spark (the "
    "command's default), v2 launched when it returns",
    "local": "stop then migrate: upgrade cutover --stop-old --local, v2 launched when it returns",
    "shadow": "blue/green: upgrade migrate beside the running v1, v2 launched beside it, "
    "upgrade cutover --shadow --stop-old",
}

#: 16 tasks of 62.5k keys at the default 1M (run 1's layout: a migrated task of more than
#: ~100k keys failed then, fixed since; kept so the runs compare).
PARTITIONS = 16
STORE = "counts"
TOPOLOGY = Path(__file__).resolve().parent / "upgrade_topology.py"
RESULTS = Path(__file__).resolve().parent / "results"


def tasks(partitions: int) -> list[tuple[str, int]]:
    """The stream tasks (one subtopology): id and partition."""
    return [(f"0_{p}", p) for p in range(partitions)]


def log(message: str) -> None:
    """Progress goes to stderr so stdout holds only the JSON."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def key_of(i: int) -> bytes:
    return b"k%08d" % i


def produce_input(
    bootstrap: str, topic: str, keys: int, tail: int, partitions: int
) -> tuple[list[int], list[int]]:
    """``keys`` records, one per key, then ``tail`` records of random existing keys; key ``i``
    goes to partition ``i % partitions``. Returns each partition's end offset after the keys and at
    the end."""
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 20}))

    def send(i: int) -> None:
        while True:
            try:
                producer.produce(topic, b"", key_of(i), i % partitions)
                return
            except BufferError:
                producer.poll(0.05)

    history = [0] * partitions
    for i in range(keys):
        send(i)
        history[i % partitions] += 1
    ends = list(history)
    rng = random.Random(42)
    for _ in range(tail):
        i = rng.randrange(keys)
        send(i)
        ends[i % partitions] += 1
    assert producer.flush(60) == 0
    return history, ends


def write_spec(
    work: Path,
    app_id: str,
    version: str,
    topic: str,
    settings: dict[str, Any] | None = None,
) -> AppSpec:
    """A spec loading ``upgrade_topology.py`` by path; v2 declares the per-record migration.
    ``settings``: the spec's ``settings:`` (the apps run as processes read theirs there)."""
    spec: dict[str, Any] = {
        "application_id": app_id,
        "topology": f"{TOPOLOGY}:build_{version}",
        "params": {"input_topic": topic},
    }
    if settings:
        spec["settings"] = settings
    if version == "v2":
        spec["migrations"] = {STORE: {"record": f"{TOPOLOGY}:counts_v2"}}
    path = work / f"{app_id}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return load_app_spec(path)


def app_settings(bootstrap: str, work: Path, app_id: str) -> StatekeeperSettings:
    return load_settings(
        bootstrap_servers=bootstrap,
        application_id=app_id,
        state_dir=work / "state",
        checkpoint_dir=work / "checkpoints",
        snapshot_url=(work / "snapshots").as_uri(),
        status_port=None,
    )


def log_spark_batch(
    checkpoint: Path, batch_id: int, batch_time_ms: int, topic: str, ends: list[int]
) -> None:
    """``offsets/<batch>`` of the app's Spark checkpoint, as Spark's offset log holds it (a
    version line, the batch metadata, the source's end offsets), written before the batch
    runs; :func:`commit_spark_batch` writes ``commits/<batch>`` after it. The migration
    reads where the old version's last micro-batch ended from this log."""
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": batch_time_ms, "conf": {}}
    source = {topic: {str(p): end for p, end in enumerate(ends)}}
    lines = ["v1", json.dumps(meta), json.dumps(source)]
    (checkpoint / "offsets" / str(batch_id)).write_text("\n".join(lines))


def commit_spark_batch(checkpoint: Path, batch_id: int) -> None:
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def process(
    settings: StatekeeperSettings,
    topology: Any,
    topic: str,
    starts: list[int],
    ends: list[int],
    *,
    batch_records: int,
    first_batch: int = 0,
) -> dict[str, Any]:
    """Every task reads its partition from ``starts`` to ``ends`` in micro-batches of
    ``batch_records`` (over all partitions, as ``max_records_per_batch``), in this process
    through the executors' task runner; the last batch commits (a drained source commits).
    Like the app's driver, it logs each batch in the app's Spark checkpoint
    (:func:`log_spark_batch`). Returns the records, seconds and the next batch id."""
    checkpoint = Path(settings.checkpoint_dir).absolute() / settings.application_id
    settings_json = settings_to_json(settings)
    per_task = max(1, batch_records // len(ends))
    positions = list(starts)
    batch_id, records, batches = first_batch, 0, 0
    results: list[TaskRunResult] = []
    started = time.perf_counter()
    while any(pos < end for pos, end in zip(positions, ends, strict=True)):
        upto = [min(pos + per_task, end) for pos, end in zip(positions, ends, strict=True)]
        last = upto == ends
        now_ms = int(time.time() * 1000)
        runs = [
            TaskRun(
                task_id,
                0,
                p,
                (OffsetRange(topic, p, positions[p], upto[p]),),
                batch_id,
                now_ms,
                force_commit=last,
                planned_at=time.time(),
            )
            for task_id, p in tasks(len(ends))
        ]
        log_spark_batch(checkpoint, batch_id, now_ms, topic, upto)
        out = run_share(0, [runs], uuid.uuid4().hex, topology, settings_json)
        commit_spark_batch(checkpoint, batch_id)
        results = [r for r in out if isinstance(r, TaskRunResult)]
        records += sum(r.records_processed for r in results)
        positions, batch_id, batches = upto, batch_id + 1, batches + 1
    seconds = time.perf_counter() - started
    assert all(r.committed for r in results), "the last batch did not commit every task"
    return {
        "records": records,
        "batches": batches,
        "seconds": seconds,
        "next_batch": batch_id,
        "results": results,
    }


def migrate(
    old_spec: AppSpec,
    new_spec: AppSpec,
    old_settings: StatekeeperSettings,
    new_settings: StatekeeperSettings,
    scratch: Path,
    spark_context: Any = None,
) -> dict[str, Any]:
    """``upgrade migrate --local`` through the library (``spark_context``: ``upgrade migrate``
    on that Spark context, one Spark task per stream task); its timings and what it read. A
    migration that fails is reported (``error``, the seconds until then), not raised: the
    other measurements still run."""
    started = time.perf_counter()
    try:
        prepared = prepare_migration(old_spec, new_spec, old_settings, new_settings, snapshot=True)
        prepared_s = time.perf_counter() - started
        report = run_migration(prepared, scratch_root=scratch, spark_context=spark_context)
    except Exception as exc:
        log(f"migration to {new_settings.application_id} failed: {exc!r}")
        return {
            "application_id": new_settings.application_id,
            "error": f"{type(exc).__module__}.{type(exc).__name__}: {exc}",
            "seconds_until_error": round(time.perf_counter() - started, 3),
        }
    seconds = time.perf_counter() - started
    assert all(t.migrated for t in report.tasks), [t.note for t in report.tasks]
    keys = sum(t.stores[STORE].written for t in report.tasks)
    per_task = sorted(t.seconds for t in report.tasks)
    return {
        "application_id": new_settings.application_id,
        "on_spark": report.on_spark,
        "seconds": round(seconds, 3),
        "prepare_seconds": round(prepared_s, 3),
        "tasks_seconds": round(seconds - prepared_s, 3),
        "keys": keys,
        "keys_per_s": round(keys / seconds),
        # Tasks per source of the old store: "snapshot" (+ the changelog tail), "changelog".
        "read_from": dict(Counter(t.read_from[STORE].split(" ")[0] for t in report.tasks)),
        "task_seconds_min_median_max": [
            round(per_task[0], 3),
            round(per_task[len(per_task) // 2], 3),
            round(per_task[-1], 3),
        ],
        "new_snapshots": sum(len(t.snapshots) for t in report.tasks),
        "batch_ids": sorted({t.batch_id for t in report.tasks}),
    }


def restore(
    settings: StatekeeperSettings,
    storage: SnapshotStorage | None,
    specs: list[Any],
    mode: str,
    partitions: int,
) -> dict[str, Any]:
    """Every v1 task restored into an empty state directory, one after the other."""
    shutil.rmtree(settings.state_dir, ignore_errors=True)
    env = StateEnvironment(settings)
    try:
        reports = []
        started = time.perf_counter()
        for task_id, _ in tasks(partitions):
            reports += restore_task(env, storage, task_id, specs, from_snapshot=mode)
        seconds = time.perf_counter() - started
    finally:
        env.close()
    return {
        "seconds": round(seconds, 3),
        "sources": dict(Counter(r.source for r in reports if r.store == STORE)),
        "records_replayed": sum(r.records_replayed for r in reports),
    }


def state_summary(
    settings: StatekeeperSettings, specs: list[Any], partitions: int
) -> dict[str, Any]:
    """Key count, total of the counts and a SHA-256 over every ``counts`` entry (key order),
    read-only from the app's local state at its last commit (untimed)."""
    digest, keys, total = hashlib.sha256(), 0, 0
    env = StateEnvironment(settings, read_only=True)
    try:
        for task_id, partition in tasks(partitions):
            task = env.task(task_id, partition, specs)
            task.open()
            try:
                for key, value in task.store(STORE).all():
                    count = value if isinstance(value, int) else value["count"]
                    digest.update(key.encode() + b"=" + str(count).encode() + b";")
                    keys += 1
                    total += count
            finally:
                task.close()
    finally:
        env.close()
    return {"keys": keys, "total": total, "sha256": digest.hexdigest()}


def producer_first_flush(bootstrap: str, topic: str, **overrides: Any) -> float:
    """Seconds from a new producer's first record to its acknowledgement (the changelog
    producers' config, ``overrides`` on top): every migrated task opens two new idempotent
    producers (records and markers), so this is paid per task."""
    producer = Producer(producer_config(bootstrap, **overrides))
    started = time.perf_counter()
    producer.produce(topic, b"", b"probe", 0)
    assert producer.flush(30) == 0
    return round(time.perf_counter() - started, 3)


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for dist in ("statekeeper", "pyspark", "confluent-kafka", "rocksdict"):
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = None
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000, help="keys in the store")
    parser.add_argument(
        "--tail", type=int, help="updates after the snapshot (default: 1 %% of --keys)"
    )
    parser.add_argument(
        "--batch-records",
        type=int,
        help="records per micro-batch, all partitions (default: max_records_per_batch)",
    )
    parser.add_argument(
        "--reprocess-records",
        type=int,
        help="reprocess only this many input records (a prefix) and extrapolate to all",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=PARTITIONS,
        help="input partitions = tasks (16: 62.5k keys a task at 1M keys, as in run 1)",
    )
    parser.add_argument(
        "--backfill-records",
        type=int,
        default=5_000_000,
        help="records of the backfill's history (0: no backfill section)",
    )
    parser.add_argument(
        "--backfill-keys", type=int, help="distinct keys of that history (default: records / 10)"
    )
    parser.add_argument(
        "--backfill-partitions", type=int, default=4, help="partitions (tasks) of the backfill"
    )
    parser.add_argument(
        "--cutover-keys",
        type=int,
        default=100_000,
        help="keys of v1's state at the cut-over (0: no cut-over section)",
    )
    parser.add_argument(
        "--cutover-partitions", type=int, default=4, help="partitions (tasks) of the cut-over"
    )
    parser.add_argument(
        "--cutover-rate", type=int, default=2_000, help="live input records/s during the cut-over"
    )
    parser.add_argument(
        "--cutover-live-s",
        type=float,
        default=5.0,
        help="seconds of live input before the cut-over and after v2's first commit",
    )
    parser.add_argument(
        "--cutover-modes",
        default="spark,local,shadow",
        help="the cut-overs, comma-separated: spark (stop then migrate, the migration on "
        "Spark, the command's default), local (stop then migrate, --local), shadow (v2 "
        "migrated and started beside the running v1, then cutover --shadow --stop-old)",
    )
    parser.add_argument(
        "--shadow-diff",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="in the shadow cut-over, pause the input until both versions are aligned and "
        "run upgrade diff before the cut-over (timed as context, not downtime)",
    )
    parser.add_argument("--output", help="where the JSON goes (default: benchmarks/results/)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    tail = args.tail if args.tail is not None else args.keys // 100

    from failover_bench import code_version  # this script's folder is on sys.path

    wall = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "upgrade",
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            **versions(),
            "load_average_start": round(os.getloadavg()[0], 2),
        },
        "code": code_version(),
        "keys": args.keys,
        "tail_records": tail,
        "input_records": args.keys + tail,
        "partitions": args.partitions,
        "tasks": args.partitions,
    }
    work = Path(tempfile.mkdtemp(prefix="sk-upgrade-bench-"))
    loads = result["machine"]["load_average_sections"] = {}
    spark = None
    try:
        with EmbeddedBroker() as broker:
            bootstrap = broker.bootstrap_servers
            # This process's Spark session (local[2]) for the migrations on Spark, started
            # first as `upgrade migrate` starts it before it migrates (not timed with them).
            t0 = time.perf_counter()
            spark, _ = batch_session("local[2]", "upgrade-bench")
            result["spark_session_s"] = round(time.perf_counter() - t0, 3)
            loads["migration"] = round(os.getloadavg()[0], 2)
            result.update(measure(bootstrap, work, args, tail, spark.sparkContext))
            spark.stop()
            spark = None
            cutovers = {}
            modes = [m for m in args.cutover_modes.split(",") if m] if args.cutover_keys else []
            unknown = set(modes) - set(CUTOVER_PATHS)
            assert not unknown, f"unknown --cutover-modes: {sorted(unknown)}"
            stop_then_migrate = [m for m in modes if m != "shadow"]
            for mode in modes:
                loads[f"cutover_{mode}"] = round(os.getloadavg()[0], 2)
                if mode == "shadow":
                    cutovers[mode] = measure_shadow_cutover(bootstrap, work, args)
                    continue
                session_s = None
                if mode == "spark":
                    # A new session for each cut-over on Spark, made before it starts, as the
                    # command makes its own before it stops the old version: its Python
                    # workers start with the migration's first Spark job, in the downtime.
                    t0 = time.perf_counter()
                    spark, _ = batch_session("local[2]", "upgrade-bench-cutover")
                    session_s = round(time.perf_counter() - t0, 3)
                try:
                    cutovers[mode] = measure_cutover(
                        bootstrap,
                        work,
                        args,
                        mode,
                        None if spark is None else spark.sparkContext,
                        stream_only=mode == stop_then_migrate[0],
                    )
                finally:
                    if spark is not None:
                        spark.stop()
                        spark = None
                cutovers[mode]["spark_session_s_before"] = session_s
            if "shadow" in cutovers:
                shadow_s = cutovers["shadow"]["downtime_s"]
                cutovers["shadow"]["vs_stop_then_migrate"] = {
                    mode: {
                        "downtime_s": cutovers[mode]["downtime_s"],
                        "shadow_downtime_ratio": round(shadow_s / cutovers[mode]["downtime_s"], 4),
                    }
                    for mode in stop_then_migrate
                }
            result["cutover"] = cutovers
            if args.backfill_records:
                loads["backfill"] = round(os.getloadavg()[0], 2)
                result["backfill"] = measure_backfill(bootstrap, work, args)
            result.update(headline(result))
    finally:
        if spark is not None:
            spark.stop()
        close_worker_services()
        if args.keep:
            log(f"work directory kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    result["machine"]["load_average_end"] = round(os.getloadavg()[0], 2)
    result["seconds"] = round(time.perf_counter() - wall, 1)

    text = json.dumps(result, indent=2)
    print(text)
    output = (
        Path(args.output) if args.output else RESULTS / time.strftime("upgrade-%Y%m%d-%H%M%S.json")
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text + "\n")
    log(f"written to {output}")


def headline(result: dict[str, Any]) -> dict[str, Any]:
    """The issue's figures side by side: each with its goal and whether it was met."""
    ratios = result["ratios"]
    backfill = result.get("backfill")
    cutovers = result.get("cutover") or {}
    downtimes = {mode: c["downtime_s"] for mode, c in cutovers.items()}
    best = min(downtimes, key=downtimes.__getitem__) if downtimes else None
    alternative = next((c["stream_only"] for c in cutovers.values() if "stream_only" in c), None)
    return {
        "backfill_records_per_s": backfill["backfill"]["records_per_s"] if backfill else None,
        # The best product path's downtime (every path's is under cutover.<mode>.downtime_s).
        "cutover_downtime_s": downtimes[best] if best else None,
        "cutover_downtime_path": best,
        "cutover_downtime_path_is": CUTOVER_PATHS[best] if best else None,
        "goals": {
            "backfill_vs_raw_consume": {
                "goal": ">= 0.5 (2 consumers in 2 processes, on 2 cores)",
                "ratio": backfill["ratios"]["backfill_vs_raw_consume_2_processes"]
                if backfill
                else None,
                "met": backfill["ratios"]["goal_backfill_at_least_half_raw_consume"]
                if backfill
                else None,
            },
            "migration_vs_full_restore": {
                "goal": ">= 1 (keys/s; the restore in one thread)",
                "local_from_snapshot": ratios["migration_from_snapshot_vs_full_restore"],
                "spark_from_snapshot": ratios["migration_spark_from_snapshot_vs_full_restore"],
                "met_local": ratios["goal_migration_at_least_full_restore"],
                "met_spark": ratios["goal_migration_on_spark_at_least_full_restore"],
            },
            "cutover_downtime_s": {
                "goal": "< 10",
                **downtimes,
                "met": {mode: d < 10 for mode, d in downtimes.items()},
                "best_path": best,
                "stream_only_alternative": alternative["downtime_s"] if alternative else None,
            },
        },
    }


def measure(
    bootstrap: str, work: Path, args: argparse.Namespace, tail: int, spark_context: Any
) -> dict[str, Any]:
    run, partitions, keys = uuid.uuid4().hex[:6], args.partitions, args.keys
    total = keys + tail
    topic = f"upgrade-input-{run}"
    admin = make_admin(bootstrap)
    ensure_topic(admin, topic, partitions)
    log(f"producing {keys:,} keys + a tail of {tail:,} updates in {partitions} partitions")
    t0 = time.perf_counter()
    history, ends = produce_input(bootstrap, topic, keys, tail, partitions)
    produce_s = time.perf_counter() - t0

    probe_topic = f"upgrade-probe-{run}"
    ensure_topic(admin, probe_topic, 1)
    probe = {
        "idempotent_producer_first_flush_s": producer_first_flush(bootstrap, probe_topic),
        "plain_producer_first_flush_s": producer_first_flush(
            bootstrap, probe_topic, **{"enable.idempotence": False}
        ),
    }

    old_app = f"upgrade-v1-{run}"
    v1_spec = write_spec(work, old_app, "v1", topic)
    v1 = v1_spec.build_topology()
    v1_settings = app_settings(bootstrap, work, old_app)
    batch_records = args.batch_records or v1_settings.max_records_per_batch
    v1_specs = v1.store_specs(0)

    # v1 starts as the app would: its topics, its fingerprint in its state root.
    sources = {topic: partitions}
    prepare_topics(admin, v1, old_app, 30.0, sources)
    v1_fingerprint = fingerprint_of(v1, old_app, sources)
    write_recorded(state_root(v1_settings.state_dir, old_app), v1_fingerprint)
    log(f"v1 processes the history of {keys:,} keys, snapshot after it, then the tail")
    built = process(
        v1_settings,
        v1,
        topic,
        [0] * partitions,
        history,
        batch_records=batch_records,
    )
    close_worker_services()  # v1 stops, is snapshotted, and starts again for the tail
    log("snapshot of every v1 task (statekeeper snapshot create, the app stopped)")
    v1_storage = SnapshotStorage((work / "snapshots").as_uri(), old_app)
    t0 = time.perf_counter()
    snapshots = snapshot_app(v1_settings, v1, v1_storage, staging_dir=work / "staging")
    snapshot_s = time.perf_counter() - t0
    snapshotted = sorted({r.manifest.task for r in snapshots})
    assert len(snapshotted) == partitions, snapshotted
    tail_run = process(
        v1_settings,
        v1,
        topic,
        history,
        ends,
        batch_records=batch_records,
        first_batch=built["next_batch"],
    )
    close_worker_services()  # v1 stops; a migration never needs its task locks

    def v2_app(name: str) -> tuple[AppSpec, StatekeeperSettings]:
        app_id = f"upgrade-v2-{name}-{run}"
        return write_spec(work, app_id, "v2", topic), app_settings(bootstrap, work, app_id)

    restore_settings = v1_settings.model_copy(update={"state_dir": work / "restored"})
    no_snapshots = work / "no-snapshots"
    no_snapshots.mkdir()
    v1_hidden = v1_settings.model_copy(update={"snapshot_url": no_snapshots.as_uri()})

    log("full changelog restore (1 of 2)")
    full_1 = restore(restore_settings, None, v1_specs, NONE, partitions)
    v1_state = state_summary(restore_settings, v1_specs, partitions)
    log("migration from the snapshot + changelog tail")
    snap_spec, snap_settings = v2_app("snap")
    mig_snap = migrate(v1_spec, snap_spec, v1_settings, snap_settings, work / "scratch")
    log("migration from the changelog alone")
    log_spec, log_settings = v2_app("log")
    mig_log = migrate(v1_spec, log_spec, v1_hidden, log_settings, work / "scratch")
    # The same two on Spark (upgrade migrate without --local): one Spark task per stream task
    # over local[2]'s two cores, the session started before (as the command starts it before
    # it migrates).
    log("migration on Spark (local[2]) from the snapshot + changelog tail")
    spark_snap_spec, spark_snap_settings = v2_app("spark-snap")
    mig_spark_snap = migrate(
        v1_spec, spark_snap_spec, v1_settings, spark_snap_settings, work / "scratch", spark_context
    )
    log("migration on Spark (local[2]) from the changelog alone")
    spark_log_spec, spark_log_settings = v2_app("spark-log")
    mig_spark_log = migrate(
        v1_spec, spark_log_spec, v1_hidden, spark_log_settings, work / "scratch", spark_context
    )
    log("full changelog restore (2 of 2)")
    full_2 = restore(restore_settings, None, v1_specs, NONE, partitions)
    log("snapshot + tail restore")
    snap_restore = restore(restore_settings, v1_storage, v1_specs, LATEST, partitions)
    full_s = (full_1["seconds"] + full_2["seconds"]) / 2
    full_kps = keys / full_s
    snap_restore_kps = keys / snap_restore["seconds"]

    # The alternative without migration: v2 rebuilds the state from the input.
    re_spec, re_settings = v2_app("reprocess")
    v2 = re_spec.build_topology()
    prepare_topics(admin, v2, re_settings.application_id, 30.0, sources)
    limit = min(args.reprocess_records or total, total)
    re_ends = ends if limit == total else [round(e * limit / total) for e in ends]
    log(f"v2 reprocesses {sum(re_ends):,} of {total:,} input records from the earliest offset")
    reprocessed = process(
        re_settings, v2, topic, [0] * partitions, re_ends, batch_records=batch_records
    )
    close_worker_services()
    re_rps = reprocessed["records"] / reprocessed["seconds"]
    extrapolated = reprocessed["records"] < total
    rebuild_s = total / re_rps if extrapolated else reprocessed["seconds"]

    log("comparing the migrated states with v1's and the reprocessed one")
    v2_specs = v2.store_specs(0)
    states = {
        name: state_summary(settings, v2_specs, partitions)
        for name, settings, migrated in (
            ("from_snapshot", snap_settings, mig_snap),
            ("from_changelog", log_settings, mig_log),
            ("spark_from_snapshot", spark_snap_settings, mig_spark_snap),
            ("spark_from_changelog", spark_log_settings, mig_spark_log),
        )
        if "error" not in migrated
    }
    re_state = None if extrapolated else state_summary(re_settings, v2_specs, partitions)

    def all_of(found: dict[str, Any], check: Any) -> bool | None:
        return all(check(s) for s in found.values()) if found else None

    def ratio(a: float, b: float) -> float:
        return round(a / b, 3)

    def vs_migration(variant: dict[str, Any], other: Any) -> float | None:
        return None if "error" in variant else other(variant)

    return {
        "batch_records": batch_records,
        "produce_rps": round(total / produce_s),
        "broker": {"embedded": True, "listener": bootstrap, **probe},
        "method": {
            "v1_state": "v1 processed its input in this process through the executors' task "
            "runner (statekeeper.worker.task_runner.run_share, no Spark; the bench logs each "
            "micro-batch in v1's Spark checkpoint as Spark would); stopped after the history of "
            "distinct keys, every task snapshotted (ops.snapshot_app, statekeeper snapshot "
            "create's path for a stopped app), started again for the tail",
            "migration": "prepare_migration + run_migration without a Spark context "
            "(= upgrade migrate --local: tasks one after the other in this process), "
            "new tasks snapshotted (the command's default)",
            "migration_spark": "prepare_migration + run_migration with this process's Spark "
            "context on local[2] (= upgrade migrate without --local: one Spark task per stream "
            "task, two at a time), the session started before and not timed (spark_session_s)",
            "restore": "statekeeper.ops.restore.restore_task per task into an empty state "
            "directory (statekeeper restore's path), tasks one after the other",
            "reprocess": "v2 under a new application id, every task through run_share in "
            "this process (the Spark executor's task path without Spark: no driver, no "
            "JVM, no task launch), micro-batches of batch_records from the earliest offset",
        },
        "v1_state": {
            "history_records": built["records"],
            "history_seconds": round(built["seconds"], 3),
            "tail_records": tail_run["records"],
            "tail_seconds": round(tail_run["seconds"], 3),
            "records_per_s": round(
                (built["records"] + tail_run["records"]) / (built["seconds"] + tail_run["seconds"])
            ),
            "snapshot_batch": built["next_batch"] - 1,
            "snapshot_seconds": round(snapshot_s, 3),
            "snapshot_bytes": sum(r.bytes_total for r in snapshots),
            "snapshotted_tasks": len(snapshotted),
            "committed_batch": tail_run["next_batch"] - 1,
            "restored": v1_state,
        },
        "migration": {"from_snapshot": mig_snap, "from_changelog": mig_log},
        "migration_spark": {
            "master": "local[2]",
            "from_snapshot": mig_spark_snap,
            "from_changelog": mig_spark_log,
        },
        "restore": {
            "full_changelog": {
                "runs": [full_1, full_2],
                "seconds_mean": round(full_s, 3),
                "keys_per_s": round(full_kps),
                "changelog_records_per_s": round(
                    (full_1["records_replayed"] + full_2["records_replayed"]) / 2 / full_s
                ),
            },
            "snapshot_tail": {**snap_restore, "keys_per_s": round(snap_restore_kps)},
        },
        "reprocess": {
            "method": "in-process task runner (run_share), no Spark",
            "application_id": re_settings.application_id,
            "records_measured": reprocessed["records"],
            "batches": reprocessed["batches"],
            "seconds_measured": round(reprocessed["seconds"], 3),
            "records_per_s": round(re_rps),
            "input_records": total,
            "extrapolated": extrapolated,
            "time_to_rebuild_s": round(rebuild_s, 3),
            "time_to_rebuild_note": (
                f"extrapolated from {reprocessed['records']:,} records to {total:,}"
                if extrapolated
                else "measured over the whole input"
            ),
            "history_note": "the input holds one record per key plus the tail: the "
            "shortest history that yields this state; an input with h records per key takes "
            "~h times as long to reprocess, the migration and restore stay as they are",
        },
        "ratios": {
            "migration_from_snapshot_vs_full_restore": vs_migration(
                mig_snap, lambda m: ratio(m["keys_per_s"], full_kps)
            ),
            "migration_from_changelog_vs_full_restore": vs_migration(
                mig_log, lambda m: ratio(m["keys_per_s"], full_kps)
            ),
            "goal_migration_at_least_full_restore": vs_migration(
                mig_snap, lambda m: m["keys_per_s"] >= full_kps
            ),
            "migration_spark_from_snapshot_vs_full_restore": vs_migration(
                mig_spark_snap, lambda m: ratio(m["keys_per_s"], full_kps)
            ),
            "migration_spark_from_changelog_vs_full_restore": vs_migration(
                mig_spark_log, lambda m: ratio(m["keys_per_s"], full_kps)
            ),
            "goal_migration_on_spark_at_least_full_restore": vs_migration(
                mig_spark_snap, lambda m: m["keys_per_s"] >= full_kps
            ),
            "migration_from_snapshot_vs_snapshot_tail_restore": vs_migration(
                mig_snap, lambda m: ratio(m["keys_per_s"], snap_restore_kps)
            ),
            "reprocess_time_vs_migration_from_snapshot": vs_migration(
                mig_snap, lambda m: ratio(rebuild_s, m["seconds"])
            ),
            "reprocess_time_vs_migration_from_changelog": vs_migration(
                mig_log, lambda m: ratio(rebuild_s, m["seconds"])
            ),
            # The input history (records per key) at which reprocessing takes as long as the
            # migration from the snapshot: a longer history favours the migration.
            "break_even_records_per_key": vs_migration(
                mig_snap, lambda m: round(m["seconds"] * re_rps / keys, 2)
            ),
        },
        "checks": {
            "v1_keys": v1_state["keys"] == keys,
            "v1_total_is_input": v1_state["total"] == total,
            "migrations_completed": sorted(states),
            # None: no migration completed (or, for the last, the reprocess was a prefix).
            "migrated_keys": all_of(states, lambda s: s["keys"] == keys),
            "migrated_states_equal": (
                len({s["sha256"] for s in states.values()}) == 1 if len(states) >= 2 else None
            ),
            "migrated_equals_v1": all_of(states, lambda s: s["sha256"] == v1_state["sha256"]),
            "migrated_equals_reprocessed": (
                None if re_state is None else all_of(states, lambda s: s == re_state)
            ),
        },
    }


# --- Apps as processes: the cut-over and the backfill --------------------------------------


def process_spec(
    root: Path, bootstrap: str, app_id: str, version: str, topic: str
) -> tuple[Path, AppSpec, StatekeeperSettings]:
    """A spec whose ``settings:`` hold everything an app run as a process needs (the broker,
    its state, checkpoint and snapshot folders under ``root``, its status file); its path,
    the spec and its resolved settings."""
    root.mkdir(parents=True, exist_ok=True)
    settings = {
        "bootstrap_servers": bootstrap,
        "state_dir": str(root / "state"),
        "checkpoint_dir": str(root / "checkpoints"),
        "snapshot_url": (root / "snapshots").as_uri(),
        "status_file": str(root / f"{app_id}.status.json"),
    }
    spec = write_spec(root, app_id, version, topic, settings)
    return root / f"{app_id}.yaml", spec, spec.resolved_settings()


def launch(
    spec_path: Path, settings: StatekeeperSettings, log_path: Path, *, stop_when_idle: bool
) -> AppProcess:
    """The app as ``statekeeper app run`` runs it (``python -m statekeeper.app.launcher``, its
    own process and Spark JVM on the spec's master, local[2]); dies with this process."""
    overrides = {"status_file": str(settings.status_path())}
    return AppProcess(spec_path, overrides, log_path, stop_when_idle=stop_when_idle).start()


def spark_batches(checkpoint: Path) -> list[dict[str, Any]]:
    """Spark's micro-batches of a query from its checkpoint: when each batch's offsets were
    logged (the batch starts) and its commit written (it ended), as file times (epoch s), and
    the source offsets the batch ends at, summed over partitions (``end``)."""
    offsets, commits = checkpoint / "offsets", checkpoint / "commits"
    if not offsets.is_dir():
        return []
    found = []
    for entry in offsets.iterdir():
        if entry.name.isdigit():
            commit = commits / entry.name
            lines = entry.read_text().splitlines()
            ends = json.loads(lines[2]) if len(lines) > 2 and lines[2].startswith("{") else {}
            found.append(
                {
                    "batch": int(entry.name),
                    "planned": entry.stat().st_mtime,
                    "committed": commit.stat().st_mtime if commit.exists() else None,
                    "end": sum(sum(parts.values()) for parts in ends.values()),
                }
            )
    return sorted(found, key=lambda b: b["batch"])


def committed_total(checkpoint: Path) -> int:
    """Source records below the newest committed micro-batch's end offsets."""
    return sum(last_committed_positions(checkpoint).values())


def wait_until(
    predicate: Any, timeout_s: float, what: str, proc: AppProcess | None = None
) -> float:
    """Poll ``predicate`` every 20 ms; returns the time (epoch s) it first held."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return time.time()
        if proc is not None and proc.proc is not None and proc.proc.poll() is not None:
            raise RuntimeError(
                f"{what}: the app exited with {proc.proc.returncode}, see {proc.log_path}"
            )
        time.sleep(0.02)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")


def state_counts(
    settings: StatekeeperSettings, specs: list[Any], partitions: int
) -> dict[str, int]:
    """Every ``counts`` entry of the app's local state at its last commit (read-only)."""
    found: dict[str, int] = {}
    env = StateEnvironment(settings, read_only=True)
    try:
        for task_id, partition in tasks(partitions):
            task = env.task(task_id, partition, specs)
            task.open()
            try:
                for key, value in task.store(STORE).all():
                    found[key] = value if isinstance(value, int) else value["count"]
            finally:
                task.close()
    finally:
        env.close()
    return found


def check_counts(found: dict[str, int], expected: Counter[int]) -> dict[str, Any]:
    """The state's counts against the counts of the records produced (the bench's own
    count of its input, independent of the app)."""
    want = {key_of(i).decode(): n for i, n in expected.items()}
    differing = sum(found.get(k) != n for k, n in want.items()) + len(found.keys() - want.keys())
    return {
        "keys": len(found),
        "total": sum(found.values()),
        "expected_keys": len(want),
        "expected_total": sum(want.values()),
        "differing_keys": differing,
        "equal": differing == 0,
    }


class Feeder(threading.Thread):
    """Live input: ``rate`` records a second to random existing keys of ``keys`` (key ``i`` to
    partition ``i % partitions``), counted per key and per partition. :meth:`pause` stops it
    sending (everything sent acknowledged) until :meth:`resume`, which starts the rate anew
    (no burst for the paused time)."""

    def __init__(self, bootstrap: str, topic: str, keys: int, partitions: int, rate: int) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.keys, self.partitions = bootstrap, topic, keys, partitions
        self.rate = rate
        self.counts: Counter[int] = Counter()
        self.per_partition = [0] * partitions
        self.halt = threading.Event()
        self.paused = threading.Event()
        self.idle = threading.Event()  # set while paused, once everything sent is acknowledged
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            producer = Producer(producer_config(self.bootstrap, **{"linger.ms": 5}))
            rng = random.Random(7)
            started, sent = time.monotonic(), 0
            while not self.halt.is_set():
                if self.paused.is_set():
                    if not self.idle.is_set():
                        assert producer.flush(60) == 0
                        self.idle.set()
                    time.sleep(0.05)
                    started, sent = time.monotonic(), 0
                    continue
                due = int((time.monotonic() - started) * self.rate)
                while sent < due:
                    i = rng.randrange(self.keys)
                    try:
                        producer.produce(self.topic, b"", key_of(i), i % self.partitions)
                    except BufferError:
                        producer.poll(0.05)
                        continue
                    self.counts[i] += 1
                    self.per_partition[i % self.partitions] += 1
                    sent += 1
                producer.poll(0)
                time.sleep(0.05)
            assert producer.flush(60) == 0
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def pause(self) -> None:
        """Stop sending; returns once every record sent is acknowledged (in the log)."""
        self.idle.clear()
        self.paused.set()
        while not self.idle.wait(0.1):
            if self.error is not None or not self.is_alive():
                raise RuntimeError(f"the feeder stopped: {self.error!r}")

    def resume(self) -> None:
        self.idle.clear()
        self.paused.clear()

    def stop(self) -> None:
        self.halt.set()
        self.join(90)
        if self.error is not None:
            raise self.error


#: Lines of an app's log that mark its start: statekeeper's (millisecond times) and Spark's
#: planning of the streaming query (second times).
TIMELINE_LINES = (
    (
        re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO statekeeper\.app: (.*)$"),
        "%Y-%m-%d %H:%M:%S,%f",
    ),
    (
        re.compile(
            r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d) WARN (ResolveWriteToStream|NativeCodeLoader)"
        ),
        "%y/%m/%d %H:%M:%S",
    ),
)


def log_timeline(log_path: Path, since: float, first_batches: int = 2) -> list[str]:
    """An app's start from its log, in seconds after ``since``: its state changes, Spark's
    JVM up (NativeCodeLoader) and query planned (ResolveWriteToStream, whole seconds), and
    its first micro-batches."""
    out: list[str] = []
    batches = 0
    for line in log_path.read_text(errors="replace").splitlines():
        for pattern, fmt in TIMELINE_LINES:
            found = pattern.match(line)
            if found is None:
                continue
            what = found.group(2)
            if what.startswith("batch "):
                batches += 1
                if batches > first_batches:
                    continue
            elif not what.startswith(("app state", "ResolveWriteToStream", "NativeCodeLoader")):
                continue
            at = datetime.strptime(found.group(1), fmt).timestamp()
            out.append(f"{at - since:7.2f} s {what}")
    return out


def timed(stamps: dict[str, list[float]], name: str, fn: Any) -> Any:
    """``fn`` wrapped: each call's begin and end (epoch s) in ``stamps[name]``."""

    def wrapper(*a: Any, **kw: Any) -> Any:
        begun = time.time()
        try:
            return fn(*a, **kw)
        finally:
            stamps[name] = [begun, time.time()]

    return wrapper


class StatusWatch:
    """When each app state first showed in an app's status file (polled by :meth:`poll`)."""

    def __init__(self, proc: AppProcess) -> None:
        self.proc = proc
        self.first_seen: dict[str, float] = {}

    def poll(self) -> None:
        state = (self.proc.status() or {}).get("state")
        if state and state not in self.first_seen:
            self.first_seen[state] = time.time()


def measure_cutover(
    bootstrap: str,
    work: Path,
    args: argparse.Namespace,
    mode: str,
    spark_context: Any,
    stream_only: bool,
) -> dict[str, Any]:
    """v1 run as an app (a process on local[2]) under live input, cut over to v2 with
    ``upgrade cutover --stop-old`` through the library (``mode`` "spark": the migration on
    this process's Spark context, the command's default; "local": ``--local``), v2 launched
    right after. The downtime runs from the old version's stop (SIGTERM) to v2's first
    micro-batch in Spark's commit log. ``stream_only``: also the alternative without a
    migration, a new id reprocessing from the earliest offset until it is where v1 stopped."""
    cutover_module = importlib.import_module("statekeeper.upgrade.cutover")
    run, parts, keys = uuid.uuid4().hex[:6], args.cutover_partitions, args.cutover_keys
    root = work / f"cutover-{mode}"
    topic = f"cutover-input-{run}"
    ensure_topic(make_admin(bootstrap), topic, parts)
    log(f"cut-over ({mode}): {keys:,} keys of history in {parts} partitions; v1 starts")
    history, _ = produce_input(bootstrap, topic, keys, 0, parts)
    v1_path, v1_spec, v1_settings = process_spec(root, bootstrap, f"cut-v1-{run}", "v1", topic)
    v2_path, v2_spec, v2_settings = process_spec(root, bootstrap, f"cut-v2-{run}", "v2", topic)
    v1_ckpt, v2_ckpt = v1_settings.checkpoint_path(), v2_settings.checkpoint_path()

    feeder = Feeder(bootstrap, topic, keys, parts, args.cutover_rate)
    v1_launch = time.time()
    v1 = launch(v1_path, v1_settings, root / "v1.log", stop_when_idle=False)
    v2: AppProcess | None = None
    try:
        feeder.start()
        caught_up = wait_until(
            lambda: committed_total(v1_ckpt) >= keys, 600, "v1 processing its history", v1
        )
        log(f"v1 processed its history {caught_up - v1_launch:.1f} s after its launch; live input")
        time.sleep(args.cutover_live_s)
        v1_batches = spark_batches(v1_ckpt)
        live = [b for b in v1_batches if b["committed"] and b["planned"] >= caught_up]

        stamps: dict[str, list[float]] = {}

        # The library call of `upgrade cutover --stop-old`, its three steps timed where the
        # cut-over calls them (the same functions, wrapped).
        steps = ("stop_gracefully", "run_migration", "verify_migration")
        originals = {name: getattr(cutover_module, name) for name in steps}
        for name, fn in originals.items():
            setattr(cutover_module, name, timed(stamps, name, fn))
        log(f"upgrade cutover --stop-old ({mode})")
        try:
            called = time.time()
            report = cutover_module.cutover(
                v1_spec,
                v2_spec,
                v1_settings,
                v2_settings,
                stop_old=True,
                spark_context=spark_context if mode == "spark" else None,
                scratch_root=root / "scratch",
                by="upgrade bench",
            )
            returned = time.time()
        finally:
            for name, fn in originals.items():
                setattr(cutover_module, name, fn)
        # v2 launched as soon as the cut-over returns (what supervision or an operator does
        # next); the downtime ends at its first micro-batch in Spark's commit log.
        v2_launch = time.time()
        v2 = launch(v2_path, v2_settings, root / "v2.log", stop_when_idle=False)
        v1.wait(60)  # reaped (stopped by the cut-over)
        v1_stopped_at = last_committed_positions(v1_ckpt)
        watch = StatusWatch(v2)

        def v2_committed() -> bool:
            watch.poll()
            return any(b["committed"] for b in spark_batches(v2_ckpt))

        wait_until(v2_committed, 300, "v2's first committed micro-batch", v2)
        first = next(b for b in spark_batches(v2_ckpt) if b["committed"])
        time.sleep(args.cutover_live_s)
        feeder.stop()
        log("v2 drains the input, then stops (SIGTERM)")
        total = keys + sum(feeder.per_partition)
        wait_until(lambda: committed_total(v2_ckpt) >= total, 300, "v2 draining", v2)
        v2.terminate()
        assert v2.wait(120) == 0, f"v2 exited uncleanly, see {v2.log_path}"
    finally:
        feeder.halt.set()
        for proc in (v1, v2):
            if proc is not None:
                proc.kill9()
    expected = Counter(range(keys)) + feeder.counts
    v2_state = check_counts(
        state_counts(v2_settings, v2_spec.build_topology().store_specs(0), parts), expected
    )

    stop_begun, stop_ended = stamps["stop_gracefully"]
    mig_begun, mig_ended = stamps["run_migration"]
    ver_begun, ver_ended = stamps["verify_migration"]
    downtime = first["committed"] - stop_begun
    states = {
        k: round(v - v2_launch, 3)
        for k, v in sorted(watch.first_seen.items(), key=lambda kv: kv[1])
    }
    result: dict[str, Any] = {
        "mode": mode,
        "migration_on": "Spark local[2] (this process's session)" if mode == "spark" else "--local",
        "keys": keys,
        "partitions": parts,
        "live_input_records_per_s": args.cutover_rate,
        "v1": {
            "application_id": v1_settings.application_id,
            "history_processed_s_after_launch": round(caught_up - v1_launch, 3),
            "live_batches_before_cutover": len(live),
            "live_batch_seconds_mean": (
                round(sum(b["committed"] - b["planned"] for b in live) / len(live), 3)
                if live
                else None
            ),
            "stop": report.old_stop,
            "stopped_at_records": sum(v1_stopped_at.values()),
        },
        "downtime_s": round(downtime, 3),
        "parts_s": {
            "graceful_stop": round(stop_ended - stop_begun, 3),
            "migration": round(mig_ended - mig_begun, 3),
            "verification": round(ver_ended - ver_begun, 3),
            "cutover_bookkeeping": round((mig_begun - stop_ended) + (returned - ver_ended), 3),
            "v2_launch_after_cutover": round(v2_launch - returned, 3),
            "v2_start_to_first_commit": round(first["committed"] - v2_launch, 3),
        },
        "v2_start": {
            "log_s_after_launch": log_timeline(root / "v2.log", v2_launch),
            "status_states_first_seen_s_after_launch": states,
            "first_batch_planned_s_after_launch": round(first["planned"] - v2_launch, 3),
            "first_batch_seconds": round(first["committed"] - first["planned"], 3),
        },
        "before_the_stop_s": {
            "cutover_checks_before_the_stop": round(stop_begun - called, 3),
        },
        "cutover_seconds": round(returned - called, 3),
        "migration": {
            "tasks": len(report.migration.tasks),
            "keys": sum(t.stores[STORE].written for t in report.migration.tasks),
            "on_spark": report.migration.on_spark,
            "batch_base": report.migration.takeover.batch_base
            if report.migration.takeover
            else None,
        },
        "verify": None if report.verify is None else report.verify.totals(),
        "downtime_end": "v2's first commits/<n> file in its Spark checkpoint (its mtime)",
        "v2_final_state": v2_state,
        "input_records": total,
    }
    if stream_only:
        result["stream_only"] = measure_reprocess_cutover(
            root,
            bootstrap,
            topic,
            run,
            parts,
            v1_stopped_at,
            expected,
            total,
            stop_ended - stop_begun,
        )
    return result


def measure_shadow_cutover(bootstrap: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The blue/green cut-over (docs/changing-apps.md, "A shadow run and its diff"), on its
    own v1 under the same live input as :func:`measure_cutover`'s: v1 keeps running while its
    committed state is migrated into v2 (``statekeeper.upgrade.shadow.migrate_beside``: the
    ``statekeeper_upgrade`` DAG's first step, ``upgrade migrate --local``; exact beside a
    running v1 since no stateful task of it feeds a repartition topic); v2 is launched beside
    v1 (it takes over at the migration and catches up); with ``--shadow-diff`` the input is
    paused until both are aligned (``shadow.wait_aligned``), ``upgrade diff`` runs
    (``diff_versions``, states and outputs) and the input resumes; after ``--cutover-live-s``
    of both under live input, ``upgrade cutover --shadow --stop-old`` (``cutover(shadow=
    True)``, its stop timed where it calls it). The downtime runs from v1's SIGTERM to v2's
    next micro-batch in Spark's commit log (a ``commits/<n>`` file written after it)."""
    from statekeeper.upgrade.diff import diff_versions
    from statekeeper.upgrade.shadow import migrate_beside, wait_aligned

    cutover_module = importlib.import_module("statekeeper.upgrade.cutover")
    run, parts, keys = uuid.uuid4().hex[:6], args.cutover_partitions, args.cutover_keys
    root = work / "cutover-shadow"
    topic = f"cutover-input-{run}"
    ensure_topic(make_admin(bootstrap), topic, parts)
    log(f"cut-over (shadow): {keys:,} keys of history in {parts} partitions; v1 starts")
    produce_input(bootstrap, topic, keys, 0, parts)
    v1_path, v1_spec, v1_settings = process_spec(root, bootstrap, f"shadow-v1-{run}", "v1", topic)
    v2_path, v2_spec, v2_settings = process_spec(root, bootstrap, f"shadow-v2-{run}", "v2", topic)
    v1_ckpt, v2_ckpt = v1_settings.checkpoint_path(), v2_settings.checkpoint_path()

    feeder = Feeder(bootstrap, topic, keys, parts, args.cutover_rate)
    v1_launch = time.time()
    v1 = launch(v1_path, v1_settings, root / "v1.log", stop_when_idle=False)
    v2: AppProcess | None = None
    diff: dict[str, Any] | None = None
    stamps: dict[str, list[float]] = {}
    try:
        feeder.start()
        caught_up = wait_until(
            lambda: committed_total(v1_ckpt) >= keys, 600, "v1 processing its history", v1
        )
        log(f"v1 processed its history {caught_up - v1_launch:.1f} s after its launch; live input")
        time.sleep(args.cutover_live_s)

        log("shadow: upgrade migrate --local beside the running v1 (shadow.migrate_beside)")
        v1_at_migration = committed_total(v1_ckpt)
        migrate_begun = time.time()
        migration = migrate_beside(v1_spec, v2_spec, v1_settings, v2_settings)
        migrate_ended = time.time()
        assert all(t.migrated for t in migration.tasks), [t.note for t in migration.tasks]
        assert migration.takeover is not None
        takeover_records = sum(
            o for parts_ in migration.takeover.start_offsets.values() for o in parts_.values()
        )

        log("shadow: v2 launched beside v1")
        v2_launch = time.time()
        v2 = launch(v2_path, v2_settings, root / "v2.log", stop_when_idle=False)
        watch = StatusWatch(v2)
        shadow_v2 = v2

        def v2_gone() -> str | None:
            """Why v2 is not running (None while it runs): wait_aligned stops at once then."""
            code = shadow_v2.proc.poll() if shadow_v2.proc is not None else None
            return None if code is None else f"exited {code}, see {shadow_v2.log_path}"

        def v2_committed() -> bool:
            watch.poll()
            return any(b["committed"] for b in spark_batches(v2_ckpt))

        wait_until(v2_committed, 300, "v2's first committed micro-batch", v2)
        first = next(b for b in spark_batches(v2_ckpt) if b["committed"])

        def level_with_v1() -> bool:
            watch.poll()
            at_v1, at_v2 = last_committed_positions(v1_ckpt), last_committed_positions(v2_ckpt)
            return bool(at_v2) and all(at_v2.get(tp, -1) >= o for tp, o in at_v1.items())

        level_at = wait_until(level_with_v1, 300, "v2 catching up with v1", v2)
        log(f"v2 level with v1 {level_at - v2_launch:.1f} s after its launch")

        if args.shadow_diff:
            log("shadow: input paused until both are aligned, then upgrade diff")
            feeder.pause()
            paused_at = time.time()
            aligned = wait_aligned(
                v1_spec, v2_spec, v1_settings, v2_settings, timeout_s=180, gone=v2_gone, poll_s=0.5
            )
            aligned_at = time.time()
            report = diff_versions(
                v1_spec, v2_spec, v1_settings, v2_settings, scratch_root=root / "scratch"
            )
            diff_ended = time.time()
            feeder.resume()
            totals = report.compared.totals()
            diff = {
                "input_paused_s": round(time.time() - paused_at, 3),
                "pause_to_aligned_s": round(aligned_at - paused_at, 3),
                "aligned_check_totals": aligned.compared.totals(),
                "diff_s": round(diff_ended - aligned_at, 3),
                "diff_note": "upgrade diff's library call (diff_versions, states and outputs; "
                "this app writes no output topic) once aligned: both states read back from "
                "their snapshots and changelogs in scratch copies, compared key by key",
                "aligned": report.aligned,
                "ok": report.ok,
                "unexpected": report.unexpected,
                "totals": totals,
                "behind": report.behind[:5],
            }
            log(f"diff: aligned {report.aligned}, ok {report.ok}, {totals}; input resumed")
        time.sleep(args.cutover_live_s)
        before_cutover = time.time()

        log("upgrade cutover --shadow --stop-old")
        original = cutover_module.stop_gracefully
        cutover_module.stop_gracefully = timed(stamps, "stop_gracefully", original)
        try:
            called = time.time()
            shadow_report = cutover_module.cutover(
                v1_spec,
                v2_spec,
                v1_settings,
                v2_settings,
                stop_old=True,
                shadow=True,
                by="upgrade bench",
            )
            returned = time.time()
        finally:
            cutover_module.stop_gracefully = original
        v1.wait(60)  # reaped (stopped by the cut-over)
        v1_stopped_at = last_committed_positions(v1_ckpt)
        stop_begun, stop_ended = stamps["stop_gracefully"]

        def committed_after(moment: float, planned_too: bool) -> dict[str, Any] | None:
            return next(
                (
                    b
                    for b in spark_batches(v2_ckpt)
                    if b["committed"]
                    and b["committed"] > moment
                    and (not planned_too or b["planned"] >= moment)
                ),
                None,
            )

        wait_until(
            lambda: committed_after(stop_begun, True) is not None,
            120,
            "v2's first micro-batch planned after v1's stop, committed",
            v2,
        )
        next_commit = committed_after(stop_begun, False)
        next_planned = committed_after(stop_begun, True)
        assert next_commit is not None and next_planned is not None
        time.sleep(args.cutover_live_s)
        feeder.stop()
        log("v2 drains the input, then stops (SIGTERM)")
        total = keys + sum(feeder.per_partition)
        wait_until(lambda: committed_total(v2_ckpt) >= total, 300, "v2 draining", v2)
        v2.terminate()
        assert v2.wait(120) == 0, f"v2 exited uncleanly, see {v2.log_path}"
    finally:
        feeder.halt.set()
        for proc in (v1, v2):
            if proc is not None:
                proc.kill9()
    expected = Counter(range(keys)) + feeder.counts
    v2_state = check_counts(
        state_counts(v2_settings, v2_spec.build_topology().store_specs(0), parts), expected
    )

    batches = spark_batches(v2_ckpt)
    done = [b for b in batches if b["committed"]]

    def mean_batch_s(found: list[dict[str, Any]]) -> float | None:
        return (
            round(sum(b["committed"] - b["planned"] for b in found) / len(found), 3)
            if found
            else None
        )

    commits = [b["committed"] for b in done]
    around = [c for c in commits if stop_begun - 10 <= c <= stop_ended + 10]
    gaps = [b - a for a, b in zip(around, around[1:], strict=False)]
    states = {
        k: round(v - v2_launch, 3)
        for k, v in sorted(watch.first_seen.items(), key=lambda kv: kv[1])
    }
    return {
        "mode": "shadow",
        "path": CUTOVER_PATHS["shadow"],
        "migration_on": "--local (shadow.migrate_beside, beside the running v1)",
        "keys": keys,
        "partitions": parts,
        "live_input_records_per_s": args.cutover_rate,
        "v1": {
            "application_id": v1_settings.application_id,
            "history_processed_s_after_launch": round(caught_up - v1_launch, 3),
            "stop": shadow_report.old_stop,
            "stopped_at_records": sum(v1_stopped_at.values()),
        },
        "downtime_s": round(next_commit["committed"] - stop_begun, 3),
        "downtime_end": "v2's next commits/<n> file in its Spark checkpoint (its mtime) after "
        "v1's SIGTERM (v2 already runs)",
        "parts_s": {
            "graceful_stop": round(stop_ended - stop_begun, 3),
            "stop_to_v2_next_commit": round(next_commit["committed"] - stop_begun, 3),
            "stop_to_commit_of_v2_batch_planned_after_stop": round(
                next_planned["committed"] - stop_begun, 3
            ),
            "cutover_call": round(returned - called, 3),
            "cutover_checks_before_the_stop": round(stop_begun - called, 3),
        },
        "parts_note": "the downtime is stop_to_v2_next_commit; v2's batch planned after the "
        "SIGTERM holds the first records v1 can no longer have processed",
        "v2_commits_around_the_stop": {
            "window": "v1's SIGTERM - 10 s to its end + 10 s",
            "commits": len(around),
            "max_gap_s": round(max(gaps), 3) if gaps else None,
            "committed_during_the_graceful_stop": sum(
                stop_begun < c <= stop_ended for c in commits
            ),
        },
        "context_not_downtime_s": {
            "migration_beside_v1": round(migrate_ended - migrate_begun, 3),
            "v2_launch_to_first_commit": round(first["committed"] - v2_launch, 3),
            "v2_launch_to_level_with_v1": round(level_at - v2_launch, 3),
            "diff": None if diff is None else diff["diff_s"],
            "pause_to_aligned": None if diff is None else diff["pause_to_aligned_s"],
            "v2_beside_v1_before_the_cutover": round(before_cutover - v2_launch, 3),
        },
        "migration": {
            "tasks": len(migration.tasks),
            "keys": sum(t.stores[STORE].written for t in migration.tasks),
            "read_from": dict(Counter(t.read_from[STORE].split(" ")[0] for t in migration.tasks)),
            "batch_base": migration.takeover.batch_base,
            "v1_committed_records_at_the_migration": v1_at_migration,
            "takeover_start_records": takeover_records,
        },
        "v2_start": {
            "log_s_after_launch": log_timeline(root / "v2.log", v2_launch),
            "status_states_first_seen_s_after_launch": states,
            "first_batch_planned_s_after_launch": round(first["planned"] - v2_launch, 3),
            "first_batch_seconds": round(first["committed"] - first["planned"], 3),
            "first_batch_records": first["end"] - takeover_records,
        },
        "v2_batch_seconds_mean": {
            "beside_v1": mean_batch_s(
                [b for b in done[1:] if level_at <= b["planned"] and b["committed"] < stop_begun]
            ),
            "alone": mean_batch_s([b for b in done if b["planned"] >= stop_ended]),
        },
        "diff": diff,
        "v2_final_state": v2_state,
        "input_records": total,
    }


def measure_reprocess_cutover(
    root: Path,
    bootstrap: str,
    topic: str,
    run: str,
    parts: int,
    v1_stopped_at: dict[tuple[str, int], int],
    expected: Counter[int],
    total: int,
    stop_s: float,
) -> dict[str, Any]:
    """The stream-only alternative: no migration; v2 under a new application id reset to the
    earliest offset reprocesses the input. Its downtime: the old version's graceful stop (the
    cut-over's, above) plus the time from its launch until its committed micro-batches reach
    where v1 stopped (before that it serves counts short of v1's)."""
    log("stream-only alternative: v2 under a new id reprocesses from the earliest offset")
    path, spec, settings = process_spec(root, bootstrap, f"cut-v2-reprocess-{run}", "v2", topic)
    ckpt = settings.checkpoint_path()
    target = sum(v1_stopped_at.values())

    def reached() -> bool:
        at = last_committed_positions(ckpt)
        return bool(at) and all(at.get(tp, 0) >= o for tp, o in v1_stopped_at.items())

    launched = time.time()
    proc = launch(path, settings, root / "v2-reprocess.log", stop_when_idle=True)
    try:
        wait_until(reached, 600, "the reprocessing reaching v1's stop", proc)
        batches = spark_batches(ckpt)
        caught = next(
            b["committed"]
            for b in batches
            if b["committed"] and b["batch"] == last_committed_batch(ckpt)
        )
        assert proc.wait(600) == 0, f"the reprocessing app failed, see {proc.log_path}"
    finally:
        proc.kill9()
    state = check_counts(
        state_counts(settings, spec.build_topology().store_specs(0), parts), expected
    )
    catch_up = caught - launched
    return {
        "application_id": settings.application_id,
        "records_to_reach_v1": target,
        "launch_to_caught_up_s": round(catch_up, 3),
        "downtime_s": round(stop_s + catch_up, 3),
        "downtime_note": "v1's graceful stop (measured in the cut-over) + launch until the "
        "newest committed micro-batch is at or past where v1 stopped (it grows with the "
        "history: this one is keys + the live input)",
        "batches": len(batches),
        "final_state": state,
        "input_records": total,
    }


def raw_consume_child(
    bootstrap: str,
    topic: str,
    parts: list[int],
    expected: int,
    prefetch: bool,
    start: Any,
    out: Any,
) -> None:
    """A plain confluent-kafka Consumer that reads ``parts`` of ``topic`` from offset 0 and
    does nothing but count records until it has ``expected``; every consumer starts reading
    when all are created (``start``: a barrier). ``prefetch``: with the read-to-EOF prefetch
    statekeeper's own readers use (50 MiB fetches, a million queued records), else
    librdkafka's defaults."""
    from confluent_kafka import Consumer, TopicPartition

    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": f"upgrade-bench-raw-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False,
        **(READ_TO_EOF_PREFETCH if prefetch else {}),
    }
    consumer = Consumer(conf)
    start.wait(120)
    begun = time.time()
    consumer.assign([TopicPartition(topic, p, 0) for p in parts])
    records = 0
    deadline = time.monotonic() + 600
    while records < expected and time.monotonic() < deadline:
        for message in consumer.consume(20_000, 0.05):
            if message.error() is None:
                records += 1
    ended = time.time()
    consumer.close()
    out.put({"records": records, "begun": begun, "ended": ended})


def raw_consume(
    bootstrap: str, topic: str, ends: list[int], processes: int, *, prefetch: bool = True
) -> dict[str, Any]:
    """``processes`` consumers in parallel processes (partition ``p`` to consumer
    ``p % processes``). ``seconds``: from the moment every consumer is created (a barrier)
    to the last one's last record (the interpreters' start, imports and the consumers'
    creation not included: ``wall_seconds`` has them)."""
    context = multiprocessing.get_context("spawn")
    queue, start = context.Queue(), context.Barrier(processes)
    groups = [[p for p in range(len(ends)) if p % processes == i] for i in range(processes)]
    started = time.time()
    children = [
        context.Process(
            target=raw_consume_child,
            args=(bootstrap, topic, group, sum(ends[p] for p in group), prefetch, start, queue),
        )
        for group in groups
    ]
    for child in children:
        child.start()
    done = [queue.get(timeout=900) for _ in children]
    for child in children:
        child.join(60)
    wall = time.time() - started
    records = sum(d["records"] for d in done)
    seconds = max(d["ended"] for d in done) - min(d["begun"] for d in done)
    return {
        "processes": processes,
        "prefetch": "read-to-EOF (statekeeper's)" if prefetch else "librdkafka defaults",
        "records": records,
        "seconds": round(seconds, 3),
        "records_per_s": round(records / seconds),
        "wall_seconds": round(wall, 3),
    }


def produce_history(
    bootstrap: str, topic: str, records: int, keys: int, partitions: int
) -> tuple[Counter[int], list[int]]:
    """``records`` records of random keys of ``keys`` (key ``i`` to partition
    ``i % partitions``, empty values): the counts per key and the partitions' ends."""
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 20}))
    rng = random.Random(5)
    counts: Counter[int] = Counter()
    ends = [0] * partitions
    for _ in range(records):
        i = rng.randrange(keys)
        while True:
            try:
                producer.produce(topic, b"", key_of(i), i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        counts[i] += 1
        ends[i % partitions] += 1
    assert producer.flush(120) == 0
    return counts, ends


def measure_backfill(bootstrap: str, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """``statekeeper backfill`` (the command in its own process: ``prepare_backfill`` +
    ``run_backfill`` on the app's Spark, local[2]) of the v1 app over a history of
    ``--backfill-records``, from earliest to now, against plain consumers counting the same
    records, and against the stream-only alternative (the app run from the earliest offset
    with its own settings until idle, ``statekeeper app run --stop-when-idle``)."""
    run, parts, records = uuid.uuid4().hex[:6], args.backfill_partitions, args.backfill_records
    keys = args.backfill_keys or max(1, records // 10)
    root = work / "backfill"
    topic = f"backfill-input-{run}"
    ensure_topic(make_admin(bootstrap), topic, parts)
    log(f"backfill: producing {records:,} records of {keys:,} keys in {parts} partitions")
    t0 = time.perf_counter()
    expected, ends = produce_history(bootstrap, topic, records, keys, parts)
    produce_s = time.perf_counter() - t0

    log("raw consume: 2 consumers in 2 processes (1 of 2)")
    raw_2a = raw_consume(bootstrap, topic, ends, 2)
    log("raw consume: 1 consumer")
    raw_1 = raw_consume(bootstrap, topic, ends, 1)
    log("raw consume: 2 consumers in 2 processes, librdkafka's default fetch settings")
    raw_2_default = raw_consume(bootstrap, topic, ends, 2, prefetch=False)

    path, spec, settings = process_spec(root, bootstrap, f"backfill-v1-{run}", "v1", topic)
    log(f"statekeeper backfill --app {path.name} --json (from earliest to now)")
    cmd = [sys.executable, "-m", "statekeeper.cli", "backfill", "--app", str(path), "--json"]
    lines: list[tuple[float, str]] = []
    started = time.time()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
        start_new_session=True,
    )

    def read_progress() -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            if line:
                lines.append((round(time.time() - started, 3), line))

    reader = threading.Thread(target=read_progress, daemon=True)
    reader.start()
    out, _ = proc.communicate(timeout=3600)
    wall = time.time() - started
    reader.join(10)
    assert proc.returncode == 0, f"backfill exited {proc.returncode}: {lines[-5:]}"
    report = json.loads(out)
    batches = spark_batches(settings.checkpoint_path())
    specs = spec.build_topology().store_specs(0)
    backfilled = check_counts(state_counts(settings, specs, parts), expected)

    log("raw consume: 2 consumers in 2 processes (2 of 2)")
    raw_2b = raw_consume(bootstrap, topic, ends, 2)

    log("stream-only alternative: the app from the earliest offset (app run --stop-when-idle)")
    s_path, s_spec, s_settings = process_spec(
        root, bootstrap, f"backfill-stream-{run}", "v1", topic
    )
    s_started = time.time()
    stream = launch(s_path, s_settings, root / "stream.log", stop_when_idle=True)
    try:
        assert stream.wait(3600) == 0, f"the stream run failed, see {stream.log_path}"
    finally:
        stream.kill9()
    s_wall = time.time() - s_started
    s_batches = spark_batches(s_settings.checkpoint_path())
    streamed = check_counts(state_counts(s_settings, specs, parts), expected)

    raw_2_rps = (raw_2a["records_per_s"] + raw_2b["records_per_s"]) / 2

    def span(found: list[dict[str, Any]], begun: float, exited: float) -> dict[str, Any]:
        """Where the run's time went, from Spark's checkpoint: before the first micro-batch
        (the process, Spark's start, the query's start), the first micro-batch (cold Python
        workers), the later ones (the steady state), after the last commit (idle wait,
        snapshot, stop)."""
        done = [b for b in found if b["committed"]]
        if not done:
            return {}
        first, last = done[0], done[-1]
        later = done[1:]
        later_s = last["committed"] - first["committed"]
        return {
            "batches": len(found),
            "to_first_batch_s": round(first["planned"] - begun, 3),
            "first_batch_s": round(first["committed"] - first["planned"], 3),
            "first_batch_records": first["end"],
            "later_batches_s": round(later_s, 3),
            "later_batches_records": last["end"] - first["end"],
            "later_batches_records_per_s": (
                round((last["end"] - first["end"]) / later_s) if later and later_s > 0 else None
            ),
            "after_last_commit_s": round(exited - last["committed"], 3),
            "records_per_s_in_batches": round(last["end"] / (last["committed"] - first["planned"])),
            "batch_seconds": [round(b["committed"] - b["planned"], 2) for b in done],
        }

    bf_span = span(batches, started, started + wall)
    s_span = span(s_batches, s_started, s_started + s_wall)
    bf_rps = report["records_per_s"]
    return {
        "records": records,
        "keys": keys,
        "partitions": parts,
        "produce_rps": round(records / produce_s),
        "raw_consume": {
            "peer": "2 plain confluent-kafka Consumers in 2 processes (partitions split), "
            "counting records only: the 2-core peer of Spark local[2]; with the read-to-EOF "
            "prefetch statekeeper's readers use (the faster, stricter peer); run before and "
            "after the backfill (records_per_s: the mean)",
            "two_processes": [raw_2a, raw_2b],
            "records_per_s": round(raw_2_rps),
            "one_process": raw_1,
            "two_processes_librdkafka_defaults": raw_2_default,
        },
        "backfill": {
            "command": "statekeeper backfill --app SPEC --json (its own process; the app's "
            "spark_master local[2])",
            "source_records": report["source_records"],
            "records_processed": report["records_processed"],
            "batches": report["batches"],
            "max_records_per_batch": report["max_records_per_batch"],
            "seconds": report["seconds"],
            "records_per_s": bf_rps,
            "seconds_note": "the report's: run_backfill's app run (Spark's start, every "
            "micro-batch, the idle second, the final snapshot, the stop)",
            "command_wall_s": round(wall, 3),
            "command_records_per_s": round(records / wall),
            "checkpoint": bf_span,
            "snapshot": (report.get("snapshot") or {}).get("state"),
            "progress": [f"{at:>8.2f} s {line}" for at, line in lines][-30:],
            "state": backfilled,
        },
        "stream_only": {
            "command": "statekeeper app run --stop-when-idle (python -m "
            "statekeeper.app.launcher) of the same app under a new id, from the earliest "
            "offset with the default settings (max_records_per_batch 250,000)",
            "wall_s": round(s_wall, 3),
            "records_per_s": round(records / s_wall),
            "checkpoint": s_span,
            "state": streamed,
        },
        "ratios": {
            "backfill_vs_raw_consume_2_processes": round(bf_rps / raw_2_rps, 3),
            "backfill_vs_raw_consume_1_process": round(bf_rps / raw_1["records_per_s"], 3),
            "backfill_vs_raw_consume_2_processes_librdkafka_defaults": round(
                bf_rps / raw_2_default["records_per_s"], 3
            ),
            "backfill_in_batches_vs_raw_consume_2_processes": (
                round(bf_span["records_per_s_in_batches"] / raw_2_rps, 3) if bf_span else None
            ),
            "backfill_after_first_batch_vs_raw_consume_2_processes": (
                round(bf_span["later_batches_records_per_s"] / raw_2_rps, 3)
                if bf_span.get("later_batches_records_per_s")
                else None
            ),
            "goal_backfill_at_least_half_raw_consume": bf_rps >= 0.5 * raw_2_rps,
            "stream_only_time_vs_backfill_command": round(s_wall / wall, 3),
        },
    }


if __name__ == "__main__":
    main()
