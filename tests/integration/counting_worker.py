"""A plain-Python stateful worker: counts events per key in four kinds of store at once.

It reads one input partition in fixed offset ranges (the batch after a commit is the next
``size`` offsets, like the offset log Spark writes before running a batch), updates
a RocksDB store, an in-memory store, an LRU store and a window store, and commits through
the task state manager. ``--crash-at STEP:BATCH`` kills the process with SIGKILL at a
commit step, which is how the fault tests pull the plug.

Run from the repository root:
``python -m tests.integration.counting_worker --bootstrap H:P --topic T --state-dir D``
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from statekeeper.changelog.progress import RichRestoreProgress
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.partition_reader import PartitionReader, assign_at, eof_consumer
from statekeeper.settings import load_settings
from statekeeper.state.environment import StateEnvironment
from statekeeper.stores import Stores, StoreSpec
from tests.integration.counting_events import (
    LRU_CAPACITY,
    WINDOW_RETENTION_MS,
    WINDOW_SIZE_MS,
    Event,
)

CRASH_STEPS = ("mid_batch", "flushed", "produced", "marked", "stored", "committed")


def store_specs() -> list[StoreSpec]:
    return [
        Stores.persistent("counts").with_serdes("str", "int").with_caching_enabled(256 * 1024),
        Stores.in_memory("mem-counts").with_serdes("str", "int"),
        # No record cache in front of the LRU store: eviction order must follow accesses.
        Stores.lru_map("recent-counts", LRU_CAPACITY).with_serdes("str", "int"),
        Stores.window(
            "window-counts", size_ms=WINDOW_SIZE_MS, retention_ms=WINDOW_RETENTION_MS
        ).with_serdes("str", "int"),
    ]


def _read_range(consumer: Consumer, tp: TopicPartition, start: int, end: int) -> list[Event]:
    """Events at offsets [start, end), or fewer if the partition ends first."""
    starts = {(tp.topic, tp.partition): start}
    assign_at(consumer, starts)
    # Not paused when done: the next range assigns the consumer afresh.
    reader = PartitionReader(
        consumer,
        starts,
        ends={(tp.topic, tp.partition): end},
        timeout_s=30.0,
        chunk_size=10_000,
        pause_finished=False,
    )
    return [Event.decode(m.key(), m.value()) for run in reader for m in run.messages]


def _crash_hook(crash_at: str | None):  # type: ignore[no-untyped-def]
    if not crash_at:
        return None
    step, _, batch = crash_at.partition(":")
    if step not in CRASH_STEPS or not batch.isdigit():
        raise SystemExit(f"--crash-at expects STEP:BATCH with STEP in {CRASH_STEPS}")

    def hook(current_step: str, batch_id: int) -> None:
        if current_step == step and batch_id == int(batch):
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def run(args: argparse.Namespace) -> dict[str, Any]:
    settings = load_settings(
        bootstrap_servers=args.bootstrap,
        state_dir=args.state_dir,
        application_id=args.application_id,
        restore_threads=4,
    )
    progress = RichRestoreProgress() if args.progress else None
    env = StateEnvironment(settings, [progress] if progress else None)
    specs = store_specs()
    env.ensure_changelogs(specs, args.partitions)
    hook = _crash_hook(args.crash_at)
    task = env.task(f"0_{args.partition}", args.partition, specs, [hook] if hook else None)
    started = time.perf_counter()
    if progress:
        with progress:
            outcomes = task.open()
    else:
        outcomes = task.open()
    restore_s = time.perf_counter() - started
    source = f"{args.topic}:{args.partition}"
    next_offset = task.processed_offsets.get(source, 0)
    counts, mem, lru, win = (task.store(s.name) for s in specs)
    consumer = eof_consumer(consumer_config(args.bootstrap), "counting-worker")
    tp = TopicPartition(args.topic, args.partition)
    processed = 0
    try:
        batch_id = -1 if task.last_batch_id is None else task.last_batch_id
        while True:
            batch_id += 1  # a retry after a crash gets the same id and the same range
            end = next_offset + args.batch_size
            events = _read_range(consumer, tp, next_offset, end)
            if not events:
                break
            for i, ev in enumerate(events):
                if ev.op == "delete":
                    counts.delete(ev.key)
                    mem.delete(ev.key)
                    lru.delete(ev.key)
                else:
                    counts.put(ev.key, (counts.get(ev.key) or 0) + 1)
                    mem.put(ev.key, (mem.get(ev.key) or 0) + 1)
                    lru.put(ev.key, (lru.get(ev.key) or 0) + 1)
                    start = ev.ts - ev.ts % WINDOW_SIZE_MS
                    win.put(ev.key, (win.fetch(ev.key, start) or 0) + 1, start)
                if args.crash_at == f"mid_batch:{batch_id}" and i == len(events) // 2:
                    # Half a batch reaches the changelog, then the process dies.
                    for store in (counts, mem, lru, win):
                        store.flush()
                    env.writer.flush(10)
                    os.kill(os.getpid(), signal.SIGKILL)
            next_offset += len(events)
            task.commit(batch_id, {source: next_offset})
            processed += len(events)
            if next_offset < end:
                break  # the partition ended inside this range
        summary = {
            "processed": processed,
            "next_offset": next_offset,
            "restore_seconds": round(restore_s, 3),
            "restores": [
                {
                    "store": o.job.store.name,
                    "full": o.full,
                    "reason": o.job.reason,
                    "start_offset": o.start_offset,
                    "restored_records": o.restored_records,
                    "records_per_s": round(o.records_per_s),
                }
                for o in outcomes
            ],
            "state": {
                "counts": dict(counts.all()),
                "mem-counts": dict(mem.all()),
                "recent-counts": dict(lru.all()),
                "window-counts": [[k, s, n] for k, s, n in win.all()],
            },
        }
    finally:
        consumer.close()
        task.close()
        env.close()
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=1, help="source partition count")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--application-id", default="counting-demo")
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--crash-at", help=f"STEP:BATCH, STEP one of {', '.join(CRASH_STEPS)}")
    parser.add_argument("--progress", action="store_true", help="show restore progress bars")
    parser.add_argument("--summary", help="write the JSON summary (state included) here")
    args = parser.parse_args(argv)
    summary = run(args)
    text = json.dumps(summary, sort_keys=True)
    if args.summary:
        with open(args.summary, "w") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
