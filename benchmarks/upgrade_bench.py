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

The migrated states (both variants) are compared with v1's and the reprocessed one (key
count, total and a digest over every entry). Tasks run one after another in one process
everywhere (``--local``, one Python thread), so the comparison is like for like; on Spark
both would spread over the cores. Prints one JSON object (progress on stderr) and writes it
to ``--output`` (default ``benchmarks/results/upgrade-<time>.json``). Usage:
python benchmarks/upgrade_bench.py [--keys N] [--tail T] [--partitions P]
[--reprocess-records M]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import Producer

from statekeeper.app.spec import AppSpec, load_app_spec
from statekeeper.app.topics import prepare_topics
from statekeeper.kafka.adapter import producer_config
from statekeeper.kafka.admin import ensure_topic, make_admin
from statekeeper.kafka.embedded import EmbeddedBroker
from statekeeper.kafka.model import OffsetRange
from statekeeper.migration import prepare_migration, run_migration
from statekeeper.ops.restore import LATEST, NONE, restore_task
from statekeeper.ops.snapshot_app import snapshot_app
from statekeeper.settings import StatekeeperSettings, load_settings
from statekeeper.snapshots import SnapshotStorage
from statekeeper.state.environment import StateEnvironment
from statekeeper.versions import fingerprint_of, write_recorded
from statekeeper.versions.recorded import state_root
from statekeeper.worker.task_run import TaskRun, TaskRunResult
from statekeeper.worker.task_runner import (
    close_worker_services,
    run_share,
    settings_to_json,
)

#: 16 tasks of 62.5k keys at the default 1M: a migrated task of more than ~100k keys fails
#: here (see --partitions).
PARTITIONS = 16
STORE = "counts"
TOPOLOGY = Path(__file__).resolve().parent / "upgrade_topology.py"
RESULTS = Path(__file__).resolve().parent / "results"
NOT_BUILT = "not built yet: this part of the product is being built; nothing measured"


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


def write_spec(work: Path, app_id: str, version: str, topic: str) -> AppSpec:
    """A spec loading ``upgrade_topology.py`` by path; v2 declares the per-record migration."""
    spec: dict[str, Any] = {
        "application_id": app_id,
        "topology": f"{TOPOLOGY}:build_{version}",
        "params": {"input_topic": topic},
    }
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
) -> dict[str, Any]:
    """``upgrade migrate --local`` through the library; its timings and what it read. A
    migration that fails is reported (``error``, the seconds until then), not raised: the
    other measurements still run."""
    started = time.perf_counter()
    try:
        prepared = prepare_migration(old_spec, new_spec, old_settings, new_settings, snapshot=True)
        prepared_s = time.perf_counter() - started
        report = run_migration(prepared, scratch_root=scratch)
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
        help="input partitions = tasks (16: 62.5k keys a task at 1M keys; a migrated task of "
        "more than ~100k keys fails on this broker, see docs/benchmarks.md)",
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
    try:
        with EmbeddedBroker() as broker:
            bootstrap = broker.bootstrap_servers
            result.update(measure(bootstrap, work, args, tail))
    finally:
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


def measure(bootstrap: str, work: Path, args: argparse.Namespace, tail: int) -> dict[str, Any]:
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
                len({s["sha256"] for s in states.values()}) == 1 if len(states) == 2 else None
            ),
            "migrated_equals_v1": all_of(states, lambda s: s["sha256"] == v1_state["sha256"]),
            "migrated_equals_reprocessed": (
                None if re_state is None else all_of(states, lambda s: s == re_state)
            ),
        },
        "backfill_records_per_s": None,
        "cutover_downtime_s": None,
        "not_measured": {"backfill_records_per_s": NOT_BUILT, "cutover_downtime_s": NOT_BUILT},
    }


if __name__ == "__main__":
    main()
