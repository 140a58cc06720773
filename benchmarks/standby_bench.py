"""Standby replica benchmark: what keeping a warm copy costs, and what it saves at a hand-off.

One task with one RocksDB store commits on the embedded broker (state dir A); a standby keeps
a copy in state dir B. Measures, in one run:
  catch_up_rps          the standby's first update, from an empty copy
  idle_step_ms/_cpu_ms  one update step when nothing was committed (wall, CPU of this process)
  idle_cpu_pct          CPU of this process while an idle standby holds its consumer open
  applying_step_ms      the step that applies a commit of --commit-records records
  commit_to_copy_ms     a commit returning to the standby's copy holding it (steps every 2 ms)
  follow_behind_ms      after a writer's last commit (--follow-records in 5k-record commits,
                        written at follow_write_rps), until the copy holds it (steps every 0.25 s)
  reopen_step_ms        the alternative: a read-only task opened and closed per step
  release_ms            release request (its file's mtime) to the standby's lock being free
  promoted_open_ms      the task opening as active in B on the standby's copy (replays
                        only the tail the standby had not applied), vs
  cold_open_ms          the same open in an empty state dir (full replay)
and prints one JSON object. Usage: python benchmarks/standby_bench.py [--records N]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path

from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.embedded import EmbeddedBroker
from statekeeper.settings import load_settings
from statekeeper.standby.standby_task import StandbyTask
from statekeeper.state.environment import StateEnvironment
from statekeeper.stores import Stores

APP, TASK = "standby-bench", "0_0"
SPECS = [Stores.persistent("kv").with_serdes("str", "bytes")]


def _median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1e3, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--commit-records", type=int, default=1_000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--follow-records", type=int, default=200_000)
    args = parser.parse_args()
    rng = random.Random(1)
    result: dict[str, object] = {
        "benchmark": "standby",
        "python": platform.python_version(),
        "records": args.records,
        "commit_records": args.commit_records,
    }
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        def settings(name: str):
            return load_settings(
                bootstrap_servers=broker.bootstrap_servers,
                state_dir=root / name,
                application_id=APP,
            )

        env = StateEnvironment(settings("a"))
        env.ensure_changelogs(SPECS, 1)
        active = env.task(TASK, 0, SPECS)
        active.open()
        per_batch = 10_000
        for batch, start in enumerate(range(0, args.records, per_batch)):
            keys = range(start, min(args.records, start + per_batch))
            active.store("kv").put_all([(f"k{i:08d}", rng.randbytes(100)) for i in keys])
            active.commit(batch, {"in:0": batch + 1})
        next_batch = batch + 1

        standby = StandbyTask(
            application_id=APP,
            task_id=TASK,
            partition=0,
            specs=SPECS,
            state_dir=root / "b",
            consumer_config=consumer_config(broker.bootstrap_servers),
        )
        started = time.perf_counter()
        standby.update()
        result["catch_up_rps"] = round(args.records / (time.perf_counter() - started))

        walls, cpu0 = [], time.process_time()
        for _ in range(args.steps):
            started = time.perf_counter()
            standby.update()
            walls.append(time.perf_counter() - started)
        result["idle_step_ms"] = _median_ms(walls)
        result["idle_step_cpu_ms"] = round((time.process_time() - cpu0) / args.steps * 1e3, 3)
        cpu0 = time.process_time()
        time.sleep(3)
        result["idle_cpu_pct"] = round((time.process_time() - cpu0) / 3 * 100, 2)

        walls, lags = [], []
        for _ in range(args.steps):
            keys = [rng.randrange(args.records) for _ in range(args.commit_records)]
            active.store("kv").put_all([(f"k{i:08d}", rng.randbytes(100)) for i in keys])
            active.commit(next_batch, {"in:0": next_batch + 1})
            next_batch += 1
            marker = active.store("kv").read_metadata().changelog_offset
            committed = time.perf_counter()
            while True:
                started = time.perf_counter()
                standby.update()
                if standby.progress["kv"].applied_offset == marker:
                    walls.append(time.perf_counter() - started)  # the step that applied it
                    break
                time.sleep(0.002)
            lags.append(time.perf_counter() - committed)
        result["applying_step_ms"] = _median_ms(walls)
        result["commit_to_copy_ms"] = _median_ms(lags)

        # Following a busy writer: a thread steps the standby every 0.25 s (as StandbyReplicas
        # does) while the task commits --follow-records in 5k-record commits.
        stop = threading.Event()

        def follow() -> None:
            while not stop.is_set():
                standby.update()
                stop.wait(0.25)

        follower = threading.Thread(target=follow)
        follower.start()
        started = time.perf_counter()
        for _ in range(0, args.follow_records, 5_000):
            keys = [rng.randrange(args.records) for _ in range(5_000)]
            active.store("kv").put_all([(f"k{i:08d}", rng.randbytes(100)) for i in keys])
            active.commit(next_batch, {"in:0": next_batch + 1})
            next_batch += 1
        written = time.perf_counter()
        marker = active.store("kv").read_metadata().changelog_offset
        while standby.progress["kv"].applied_offset != marker:
            time.sleep(0.005)
        stop.set()
        follower.join()
        result["follow_write_rps"] = round(args.follow_records / (written - started))
        result["follow_behind_ms"] = round((time.perf_counter() - written) * 1e3, 1)

        standby.release()
        reader = StateEnvironment(settings("b"), read_only=True)
        walls = []
        for _ in range(args.steps):
            started = time.perf_counter()
            with reader.task(TASK, 0, SPECS):
                pass
            walls.append(time.perf_counter() - started)
        result["reopen_step_ms"] = _median_ms(walls)
        reader.close()

        # The hand-off: one more commit the standby has not seen, then the task opens in B.
        standby.update()
        keys = [rng.randrange(args.records) for _ in range(args.commit_records)]
        active.store("kv").put_all([(f"k{i:08d}", rng.randbytes(100)) for i in keys])
        active.commit(next_batch, {"in:0": next_batch + 1})
        active.close()
        stop = threading.Event()

        def answer_requests() -> None:  # what StandbyReplicas' updater does between steps
            while not stop.is_set() and not standby.release_if_requested():
                time.sleep(0.02)

        watcher = threading.Thread(target=answer_requests)
        watcher.start()
        env_b = StateEnvironment(settings("b"))
        started = time.perf_counter()
        with env_b.task(TASK, 0, SPECS) as promoted:
            result["promoted_open_ms"] = round((time.perf_counter() - started) * 1e3, 1)
            result["promoted_replayed"] = promoted.restore_outcomes[0].restored_records
        stop.set()
        watcher.join()
        result["release_ms"] = standby.status()["last_release_ms"]
        env_b.close()

        env_c = StateEnvironment(settings("c"))
        started = time.perf_counter()
        with env_c.task(TASK, 0, SPECS) as cold:
            result["cold_open_ms"] = round((time.perf_counter() - started) * 1e3, 1)
            result["cold_replayed"] = cold.restore_outcomes[0].restored_records
        env_c.close()
        env.close()
    print(json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
