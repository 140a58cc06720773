"""Restore benchmark: 1M changelog records over 100k keys in 4 partitions, on the embedded broker.

Measures, in one run and on the same topic:
  raw_consume_rps      tuned consumers reading every partition to EOF (the physical limit)
  full_restore_rps     four RocksDB stores rebuilt from offset 0 in parallel
  partial_restore_rps  the same stores catching up on a 200k-record tail from their checkpoint
and prints one JSON object. The records carry a task's epoch header and the markers its
marker header (as an app's changelog does since fencing), behind the task's begin record.

Raw consume and full restore alternate in ABBA rounds (raw, restore, restore, raw), each
restore into fresh stores; ``full_vs_raw`` is the median of the rounds' ratios, so a noisy
moment on the machine moves one round, not the figure.
Usage: python benchmarks/restore_bench.py [--records N] [--keys K] [--rounds R]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import struct
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from process_memory import peak_rss_by_role  # this script's folder is on sys.path

from statekeeper.changelog.fencing import (
    begin_record,
    marker_headers,
    marker_key,
    record_headers,
)
from statekeeper.changelog.records import CommitMarker, changelog_topic
from statekeeper.changelog.restorer import ChangelogRestorer, RestoreJob
from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.admin import ensure_topic, make_admin
from statekeeper.kafka.embedded import EmbeddedBroker
from statekeeper.stores import Stores, build_store

APP, STORE, PARTITIONS = "bench", "counts", 4
EPOCH = 1


def produce_changelog(
    bootstrap: str,
    topic: str,
    records: int,
    keys: int,
    first_batch: int,
    batch_records: int,
    epoch: int = EPOCH,
) -> int:
    """Write ``records`` absolute count updates, a commit marker per partition per batch, all
    under ``epoch``; the first call (``first_batch`` 0) writes each partition's begin record."""
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 20}))
    pack = struct.Struct(">q").pack
    headers = record_headers(epoch)
    if first_batch == 0 and epoch:
        for p in range(PARTITIONS):
            key, value, begin_headers = begin_record(epoch)
            producer.produce(topic, value, key, p, headers=begin_headers)
        producer.flush(60)
    batch_id = first_batch
    for start in range(0, records, batch_records):
        for i in range(start, min(records, start + batch_records)):
            key = i % keys
            value = pack(i // keys + 1)
            while True:
                try:
                    producer.produce(
                        topic, value, b"key-%07d" % key, key % PARTITIONS, headers=headers
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
        # Like a task's commit: the marker starts its own produce batch (the restorer relies
        # on it when the broker's high watermark trails the log end).
        producer.flush(60)
        for p in range(PARTITIONS):
            marker = CommitMarker(
                batch_id, f"0_{p}", STORE, {f"input:{p}": start + batch_records}, epoch
            )
            producer.produce(
                topic, marker.encode(), marker_key(epoch), p, headers=marker_headers(epoch)
            )
        batch_id += 1
    assert producer.flush(60) == 0
    return batch_id


def raw_consume(bootstrap: str, topic: str) -> tuple[int, float]:
    """Every partition to EOF, one tuned consumer per partition in parallel threads."""

    def one(p: int) -> int:
        consumer = Consumer(consumer_config(bootstrap, **{"fetch.wait.max.ms": 10}))
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
        n = 0
        try:
            while True:
                msgs = consumer.consume(20_000, 0.05)
                last_error = msgs[-1].error() if msgs else None
                if last_error is not None and last_error.code() == KafkaError._PARTITION_EOF:
                    return n + len(msgs) - 1
                n += len(msgs)
        finally:
            consumer.close()

    started = time.perf_counter()
    with ThreadPoolExecutor(PARTITIONS) as pool:
        total = sum(pool.map(one, range(PARTITIONS)))
    return total, time.perf_counter() - started


def rate(run: tuple[int, float]) -> float:
    records, seconds = run
    return records / seconds


def restore(bootstrap: str, state_dir: Path, topic: str, threads: int) -> tuple[int, float, list]:
    spec = Stores.persistent(STORE).with_serdes("bytes", "int")
    stores = [build_store(spec, state_dir / f"0_{p}" / STORE, None) for p in range(PARTITIONS)]
    restorer = ChangelogRestorer(consumer_config(bootstrap), threads=threads)
    jobs = [
        RestoreJob(topic, p, store, f"0_{p}", full=store.read_metadata().changelog_offset is None)
        for p, store in enumerate(stores)
    ]
    started = time.perf_counter()
    outcomes = restorer.restore_all(jobs)
    seconds = time.perf_counter() - started
    keys = sum(s.approximate_num_entries() for s in stores)
    for s in stores:
        s.close()
    return sum(o.restored_records for o in outcomes), seconds, [keys, outcomes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--tail", type=int, default=200_000)
    parser.add_argument("--batch-records", type=int, default=250_000)
    parser.add_argument("--threads", type=int, default=1, help="restore threads (settings)")
    parser.add_argument("--rounds", type=int, default=3, help="ABBA rounds of raw vs restore")
    parser.add_argument("--output", help="also write the JSON here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="sk-restore-bench-"))
    try:
        with EmbeddedBroker() as broker:
            bootstrap = broker.bootstrap_servers
            topic = changelog_topic(APP, STORE)
            ensure_topic(make_admin(bootstrap), topic, PARTITIONS, {"cleanup.policy": "compact"})
            t0 = time.perf_counter()
            next_batch = produce_changelog(
                bootstrap, topic, args.records, args.keys, 0, args.batch_records
            )
            produce_s = time.perf_counter() - t0

            raw_rps: list[float] = []
            full_rps: list[float] = []
            ratios: list[float] = []
            for round_no in range(args.rounds):
                # ABBA: raw, restore, restore, raw; cache warmth and drift favour neither side.
                round_raw = [rate(raw_consume(bootstrap, topic))]
                round_full = []
                for run in range(2):
                    state_dir = work / f"full-{round_no}-{run}"
                    full_n, full_s, (full_keys, _) = restore(
                        bootstrap, state_dir, topic, args.threads
                    )
                    assert full_n == args.records and full_keys == args.keys, (full_n, full_keys)
                    round_full.append(full_n / full_s)
                    if round_no or run:
                        shutil.rmtree(state_dir)
                round_raw.append(rate(raw_consume(bootstrap, topic)))
                raw_rps += round_raw
                full_rps += round_full
                ratios.append(statistics.fmean(round_full) / statistics.fmean(round_raw))

            # The partial restore continues the first round's first stores.
            produce_changelog(
                bootstrap, topic, args.tail, args.keys, next_batch, args.batch_records
            )
            part_n, part_s, (_, part_outcomes) = restore(
                bootstrap, work / "full-0-0", topic, args.threads
            )
            # The restores run in this process: its peak covers them (and the produce).
            peak_rss = peak_rss_by_role()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    raw_median = statistics.median(raw_rps)
    result = {
        "benchmark": "restore",
        "records": args.records,
        "keys": args.keys,
        "partitions": PARTITIONS,
        "epoch_headers": bool(EPOCH),
        "restore_threads": args.threads,
        "rounds": args.rounds,
        "produce_rps": round(args.records / produce_s),
        "raw_consume_rps": round(raw_median),
        "raw_consume_runs_rps": [round(r) for r in raw_rps],
        "full_restore_rps": round(statistics.median(full_rps)),
        "full_restore_runs_rps": [round(r) for r in full_rps],
        "full_restore_keys": args.keys,
        "full_vs_raw": round(statistics.median(ratios), 3),
        "full_vs_raw_rounds": [round(r, 3) for r in ratios],
        "partial_restore_rps": round(part_n / part_s),
        "partial_restore_seconds": round(part_s, 3),
        "partial_restore_records": part_n,
        "partial_restore_full": any(o.full for o in part_outcomes),
        "partial_vs_raw": round(part_n / part_s / raw_median, 3),
        "peak_rss": peak_rss,
        "python": platform.python_version(),
        "cpus": __import__("os").cpu_count(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")


if __name__ == "__main__":
    main()
