"""Snapshot + tail restore vs full changelog replay, same RocksDB store, same run.

A changelog of ``--records`` count updates over ``--keys`` keys in 4 partitions, with commit
markers (as in ``restore_bench.py``: a long-running app on a broker that has not compacted),
is restored once into four live tasks (untimed). Then, with ``file://`` snapshot storage:

  snapshot_create_seconds   stage + upload every task's store (the first, full snapshot)
  snapshot_pause_ms         the longest stage (checkpoint) pause of one task
  incremental_upload_ratio  bytes uploaded ÷ bytes of the second snapshot, taken after
                            changing 1 % of the keys through the tasks and committing
  snapshot_tail_seconds     task dirs deleted, newest snapshot installed + ``--tail``
                            records replayed, every task opened and usable
  full_replay_seconds       task dirs deleted, full replay (``--from-snapshot none``)

Both restored states are compared (key count and a digest of every entry). Prints one JSON
object on stdout, progress on stderr. Usage:
python benchmarks/snapshot_restore_bench.py [--records N] [--keys K] [--tail T]
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
from pathlib import Path

from restore_bench import APP, PARTITIONS, STORE, produce_changelog

from statekeeper.changelog.records import changelog_topic
from statekeeper.kafka.admin import ensure_topic, make_admin
from statekeeper.kafka.embedded import EmbeddedBroker
from statekeeper.ops.restore import NONE, restore_task
from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotResult, SnapshotStorage, snapshot_task
from statekeeper.state.directory import TaskDirectory
from statekeeper.state.environment import StateEnvironment
from statekeeper.stores import Stores

SPECS = [Stores.persistent(STORE).with_serdes("bytes", "int")]
TASKS = [(f"0_{p}", p) for p in range(PARTITIONS)]


def log(message: str) -> None:
    """Progress goes to stderr so stdout holds only the JSON."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def snapshot_all(
    env: StateEnvironment, storage: SnapshotStorage, staging: Path
) -> tuple[list[SnapshotResult], float]:
    """Snapshot every task (opened at its last commit); results and wall seconds."""
    results: list[SnapshotResult] = []
    started = time.perf_counter()
    for task_id, partition in TASKS:
        with env.task(task_id, partition, SPECS) as task:
            results += snapshot_task(task, storage, staging)
    return results, time.perf_counter() - started


def change_keys(env: StateEnvironment, keys: int, share: float, batch_id: int) -> int:
    """Overwrite ``share`` of each task's keys through the task and commit; keys changed."""
    rng = random.Random(42)
    changed = 0
    for task_id, partition in TASKS:
        own = range(partition, keys, PARTITIONS)
        picked = rng.sample(own, max(1, int(len(own) * share)))
        with env.task(task_id, partition, SPECS) as task:
            task.store(STORE).put_all([(b"key-%07d" % k, 1_000_000 + k) for k in picked])
            task.commit(batch_id, {f"input:{partition}": batch_id})
        changed += len(picked)
    return changed


def state_digest(env: StateEnvironment) -> tuple[int, str, dict[bytes, int]]:
    """Key count, SHA-256 over every entry in key order, and a sample of entries."""
    digest, count, sample = hashlib.sha256(), 0, {}
    for task_id, partition in TASKS:
        with env.task(task_id, partition, SPECS) as task:
            for key, value in task.store(STORE).all():
                digest.update(key)
                digest.update(value.to_bytes(8, "big", signed=True))
                if count % 997 == 0:
                    sample[key] = value
                count += 1
    return count, digest.hexdigest(), sample


def timed_restore(
    env: StateEnvironment, storage: SnapshotStorage, from_snapshot: str
) -> tuple[float, list]:
    """Delete every task dir, then restore each task until it is opened and usable."""
    for task_id, _ in TASKS:
        shutil.rmtree(TaskDirectory(env.settings.state_dir, APP, task_id).path, ignore_errors=True)
    started = time.perf_counter()
    reports = []
    for task_id, _ in TASKS:
        reports += restore_task(env, storage, task_id, SPECS, from_snapshot=from_snapshot)
    return time.perf_counter() - started, reports


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--tail", type=int, default=10_000)
    parser.add_argument("--batch-records", type=int, default=250_000)
    parser.add_argument("--changed-share", type=float, default=0.01)
    parser.add_argument("--output", help="also write the JSON here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="sk-snapshot-bench-"))
    try:
        with EmbeddedBroker() as broker:
            bootstrap = broker.bootstrap_servers
            topic = changelog_topic(APP, STORE)
            ensure_topic(make_admin(bootstrap), topic, PARTITIONS, {"cleanup.policy": "compact"})
            log(f"producing {args.records:,} records over {args.keys:,} keys")
            t0 = time.perf_counter()
            next_batch = produce_changelog(
                bootstrap, topic, args.records, args.keys, 0, args.batch_records
            )
            produce_s = time.perf_counter() - t0
            settings = load_settings(
                bootstrap_servers=bootstrap, state_dir=work / "state", application_id=APP
            )
            env = StateEnvironment(settings)
            storage = SnapshotStorage((work / "snapshots").as_uri(), APP)
            try:
                log("restoring the live state (untimed)")
                t0 = time.perf_counter()
                for task_id, partition in TASKS:
                    # Opening replays the changelog; closing keeps the state on disk.
                    with env.task(task_id, partition, SPECS):
                        pass
                live_restore_s = time.perf_counter() - t0
                log("first snapshot")
                first, create_s = snapshot_all(env, storage, work / "staging")
                log(f"changing {args.changed_share:.0%} of the keys, second snapshot")
                changed = change_keys(env, args.keys, args.changed_share, next_batch)
                second, _ = snapshot_all(env, storage, work / "staging")
                log(f"appending a tail of {args.tail:,} records")
                produce_changelog(
                    bootstrap, topic, args.tail, args.keys, next_batch + 1, args.batch_records
                )
                live = state_digest(env)
                log("restore from the newest snapshot + tail")
                tail_s, tail_reports = timed_restore(env, storage, "latest")
                from_snapshot = state_digest(env)
                log("full replay")
                full_s, full_reports = timed_restore(env, storage, NONE)
                replayed = state_digest(env)
            finally:
                env.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    states_equal = (
        live[:2] == from_snapshot[:2] == replayed[:2] and live[2] == from_snapshot[2] == replayed[2]
    )
    result = {
        "benchmark": "snapshot_restore",
        "records": args.records,
        "keys": args.keys,
        "tail_records": args.tail,
        "partitions": PARTITIONS,
        "tasks": len(TASKS),
        "snapshot_tail_seconds": round(tail_s, 3),
        "full_replay_seconds": round(full_s, 3),
        "full_replay_vs_snapshot_tail": round(full_s / tail_s, 2),
        "snapshot_create_seconds": round(create_s, 3),
        "snapshot_pause_ms": round(max(r.pause_ms for r in first), 3),
        "snapshot_pause_ms_per_task": {r.manifest.task: round(r.pause_ms, 3) for r in first},
        "snapshot_bytes": sum(r.bytes_total for r in first),
        "incremental_upload_ratio": round(
            sum(r.bytes_uploaded for r in second) / sum(r.bytes_total for r in second), 4
        ),
        "incremental_bytes_uploaded": sum(r.bytes_uploaded for r in second),
        "incremental_bytes_total": sum(r.bytes_total for r in second),
        "keys_changed_before_second_snapshot": changed,
        "snapshot_tail_records_replayed": sum(r.records_replayed for r in tail_reports),
        "snapshot_tail_bytes_downloaded": sum(r.bytes_downloaded for r in tail_reports),
        "snapshot_tail_sources": sorted({r.source for r in tail_reports}),
        "full_replay_records": sum(r.records_replayed for r in full_reports),
        "full_replay_sources": sorted({r.source for r in full_reports}),
        "restored_keys": from_snapshot[0],
        "states_equal": states_equal,
        "produce_rps": round(args.records / produce_s),
        "live_restore_seconds": round(live_restore_s, 3),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")


if __name__ == "__main__":
    main()
