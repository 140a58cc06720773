"""Store engines side by side: the example SQLite store (docs/custom-stores.md) beside RocksDB.

The inner stores are driven directly (``SQLiteStoreSupplier().get``, ``RocksDBKeyValueStore``,
``InMemoryKeyValueStore`` as a reference), on ``--keys`` keys of 16 bytes and values of
``--value-bytes`` random (incompressible) bytes, the same data for every engine. Per run, in
a fresh directory under /tmp:

  open_empty_ms        create the store in an empty directory
  puts_per_s           keys inserted in random order: ``put_all`` of ``--commit-keys`` keys,
                       then ``commit(StoreMetadata(...))``, as the runtime's batches do
  commit_p50_ms        the median commit of those batches (the staged writes made durable)
  puts_written_per_key bytes the process passed to write calls during the puts, per key
                       (``wchar``: SQLite's pages and journal; RocksDB's WAL, and any
                       memtable flush that ran meanwhile; RocksDB's flush at close is not in)
  updates_per_s        the same, overwriting a random quarter of the keys with new values
  get_hits_per_s       point gets of committed keys, random order
  get_misses_per_s     point gets of absent keys (interleaved with the present ones)
  scan_entries_per_s   one full range scan, entries per second
  short_scan_entries_per_s  ``--scans`` scans of ``--scan-length`` consecutive keys
  disk_bytes           every file in the store's directory after close
  reopen_ms            close, then open + ``read_metadata`` + one get (median of 3)
  restore_per_s        ``restore_batch`` of ``--restore-batch`` changelog records with their
                       metadata, into an empty store, records per second
  updates_written_per_key, restore_written_per_record: as puts_written_per_key

The in-memory store has no files: no disk bytes and no reopen. ``sqlite_sync_off`` is the
same SQLite store with ``synchronous=OFF``: like RocksDB here (its WAL is written, not
fsynced), its commits survive a process crash but not a power loss, so it separates
SQLite's fsyncs from the rest of its cost. ``--stack`` adds both engines through
``build_store``'s layers (bytes serdes, no changelog sink: RocksDB then has its read cache).

Engines run in turn in each round, the order reversed every other round (rocksdb, sqlite,
..., then ..., sqlite, rocksdb), all in one process. ``ratios_vs_rocksdb`` holds, per
engine and metric, the median over rounds of engine ÷ rocksdb in the same round (rates: < 1
is slower; times and bytes: > 1 is more). The cyclic GC is paused in timed sections. Prints
one JSON object on stdout, progress on stderr.
Usage: python benchmarks/store_engines.py [--keys N] [--value-bytes B] [--repeats R]
       [--engines rocksdb,sqlite,...] [--stack] [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import Stores, build_store
from statekeeper.stores.memory import InMemoryKeyValueStore
from statekeeper.stores.rocksdb import RocksDBKeyValueStore

# The worked example lives with its app, importable from the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from spark_apps.word_count_sqlite.sqlite_store import SQLiteStoreSupplier  # noqa: E402

NAME = "bench"
PARTITION = "input:0"
RATES = (
    "puts_per_s",
    "updates_per_s",
    "get_hits_per_s",
    "get_misses_per_s",
    "scan_entries_per_s",
    "short_scan_entries_per_s",
    "restore_per_s",
)
TIMES = (
    "open_empty_ms",
    "commit_p50_ms",
    "reopen_ms",
    "disk_bytes",
    "puts_written_per_key",
    "updates_written_per_key",
    "restore_written_per_record",
)

_DIGITS = {"_ms": 3, "key": 1, "ord": 1}  # by a metric's end; rates: whole numbers


def log(message: str) -> None:
    """Progress goes to stderr so stdout holds only the JSON."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Engine:
    name: str
    open: Callable[[Path], Any]  # the store directory -> an open store
    persistent: bool = True


def _engines(names: list[str], stack: bool) -> list[Engine]:
    sqlite_full, sqlite_off = SQLiteStoreSupplier(), SQLiteStoreSupplier(synchronous="OFF")
    known = {
        "rocksdb": Engine("rocksdb", lambda d: RocksDBKeyValueStore(NAME, d)),
        "sqlite": Engine("sqlite", lambda d: sqlite_full.get(NAME, d)),
        "sqlite_sync_off": Engine("sqlite_sync_off", lambda d: sqlite_off.get(NAME, d)),
        "memory": Engine("memory", lambda d: InMemoryKeyValueStore(NAME), persistent=False),
    }
    unknown = set(names) - set(known)
    if unknown:
        raise SystemExit(f"unknown engines {sorted(unknown)}; known: {sorted(known)}")
    engines = [known[n] for n in names]
    if stack:
        rocks_spec = Stores.persistent(NAME)
        sqlite_spec = Stores.custom(NAME, sqlite_full)
        engines += [
            Engine("rocksdb_stack", lambda d: build_store(rocks_spec, d, None)),
            Engine("sqlite_stack", lambda d: build_store(sqlite_spec, d, None)),
        ]
    return engines


@dataclass
class Data:
    keys: list[bytes]  # in insertion (random) order
    values: list[bytes]
    sorted_keys: list[bytes]
    updates: list[tuple[bytes, bytes]]
    hits: list[bytes]
    misses: list[bytes]
    scan_starts: list[int]


def make_data(args: argparse.Namespace) -> Data:
    rng = random.Random(7)
    # 16-byte keys; present keys are even numbers, the misses odd ones between them.
    keys = [b"k%015d" % (2 * i) for i in range(args.keys)]
    sorted_keys = list(keys)
    rng.shuffle(keys)
    values = [rng.randbytes(args.value_bytes) for _ in keys]
    updated = rng.sample(keys, args.keys // 4)
    updates = [(k, rng.randbytes(args.value_bytes)) for k in updated]
    gets = min(args.gets, args.keys)
    hits = rng.sample(keys, gets)
    misses = [b"k%015d" % (2 * rng.randrange(args.keys) + 1) for _ in range(gets)]
    span = max(1, args.keys - args.scan_length)
    scan_starts = [rng.randrange(span) for _ in range(args.scans)]
    return Data(keys, values, sorted_keys, updates, hits, misses, scan_starts)


@contextmanager
def timed(out: list[float]) -> Iterator[None]:
    """Wall seconds of the block, appended to ``out``; the cyclic GC paused meanwhile."""
    gc.collect()
    gc.disable()
    started = time.perf_counter()
    try:
        yield
    finally:
        out.append(time.perf_counter() - started)
        gc.enable()


def write_batches(
    store: Any, items: list[tuple[bytes, bytes]], per_commit: int, first_batch: int
) -> tuple[float, list[float], int]:
    """``put_all`` + ``commit`` per ``per_commit`` items: total seconds, commit seconds,
    the next batch id."""
    commits: list[float] = []
    batch_id = first_batch
    gc.collect()
    gc.disable()
    started = time.perf_counter()
    try:
        for lo in range(0, len(items), per_commit):
            store.put_all(items[lo : lo + per_commit])
            t = time.perf_counter()
            store.commit(
                StoreMetadata(
                    changelog_offset=batch_id * per_commit,
                    batch_id=batch_id,
                    source_offsets={PARTITION: lo + per_commit},
                )
            )
            commits.append(time.perf_counter() - t)
            batch_id += 1
        total = time.perf_counter() - started
    finally:
        gc.enable()
    return total, commits, batch_id


def written() -> int:
    """Bytes this process (every thread: RocksDB's flushes too) has passed to write calls
    (``wchar`` of /proc/self/io); 0 where there is no /proc."""
    try:
        with open("/proc/self/io") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("wchar:"))
    except OSError:
        return 0


def disk_usage(path: Path) -> tuple[int, dict[str, int]]:
    """Bytes of every file under ``path``, and by kind (a file's suffix, or its name's
    stem for RocksDB's LOG, MANIFEST-n, OPTIONS-n, CURRENT...)."""
    total, kinds = 0, {}
    for f in path.rglob("*"):
        if f.is_file():
            size = f.stat().st_size
            total += size
            kind = f.suffix.lstrip(".") or f.name.split("-")[0].split(".")[0]
            kinds[kind] = kinds.get(kind, 0) + size
    return total, dict(sorted(kinds.items()))


def run_engine(engine: Engine, data: Data, args: argparse.Namespace, work: Path) -> dict:
    """Every measurement of one engine, in a fresh directory (removed after)."""
    directory = work / engine.name
    shutil.rmtree(directory, ignore_errors=True)
    out: dict[str, Any] = {}
    n = len(data.keys)
    try:
        t: list[float] = []
        with timed(t):
            store = engine.open(directory)
        out["open_empty_ms"] = round(t[-1] * 1e3, 3)

        items = list(zip(data.keys, data.values, strict=True))
        w = written()
        total, commits, batch_id = write_batches(store, items, args.commit_keys, 0)
        out["puts_written_per_key"] = round((written() - w) / n, 1)
        out["puts_per_s"] = round(n / total)
        out["commit_p50_ms"] = round(statistics.median(commits) * 1e3, 3)
        w = written()
        total, _, batch_id = write_batches(store, data.updates, args.commit_keys, batch_id)
        out["updates_written_per_key"] = round((written() - w) / len(data.updates), 1)
        out["updates_per_s"] = round(len(data.updates) / total)

        get = store.get
        with timed(t):
            found = sum(1 for k in data.hits if get(k) is not None)
        assert found == len(data.hits), (engine.name, found)
        out["get_hits_per_s"] = round(len(data.hits) / t[-1])
        with timed(t):
            found = sum(1 for k in data.misses if get(k) is not None)
        assert found == 0, (engine.name, found)
        out["get_misses_per_s"] = round(len(data.misses) / t[-1])

        with timed(t):
            scanned = sum(1 for _ in store.range(None, None))
        assert scanned == n, (engine.name, scanned)
        out["scan_entries_per_s"] = round(n / t[-1])
        sk, length = data.sorted_keys, args.scan_length
        with timed(t):
            scanned = sum(
                sum(1 for _ in store.range(sk[i], sk[min(i + length, n) - 1]))
                for i in data.scan_starts
            )
        out["short_scan_entries_per_s"] = round(scanned / t[-1])
        store.close()

        if engine.persistent:
            out["disk_bytes"], out["disk_bytes_by_kind"] = disk_usage(directory)
            out["disk_bytes_per_key"] = round(out["disk_bytes"] / n, 1)
            reopens: list[float] = []
            probe = data.hits[0]
            for _ in range(3):
                with timed(reopens):
                    store = engine.open(directory)
                    metadata = store.read_metadata()
                    value = store.get(probe)
                store.close()
                assert metadata.batch_id == batch_id - 1 and value is not None, (
                    engine.name,
                    metadata,
                )
            out["reopen_ms"] = round(statistics.median(reopens) * 1e3, 3)
        shutil.rmtree(directory, ignore_errors=True)

        # Restore: changelog-like batches (the keys with their values, a key's later record
        # winning), each with the metadata of the commit marker that closes it.
        store = engine.open(directory)
        per = args.restore_batch
        records = items
        w = written()
        with timed(t):
            for lo in range(0, n, per):
                store.restore_batch(
                    records[lo : lo + per],
                    StoreMetadata(changelog_offset=lo + per, batch_id=lo // per, source_offsets={}),
                )
        out["restore_per_s"] = round(n / t[-1])
        out["restore_written_per_record"] = round((written() - w) / n, 1)
        assert store.get(data.hits[-1]) is not None
        assert store.read_metadata().batch_id == (n - 1) // per, engine.name
        store.close()
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--value-bytes", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=4, help="rounds of every engine")
    parser.add_argument("--commit-keys", type=int, default=5_000, help="keys per commit")
    parser.add_argument("--restore-batch", type=int, default=2_000, help="records per batch")
    parser.add_argument("--gets", type=int, default=50_000, help="hits, and as many misses")
    parser.add_argument("--scans", type=int, default=2_000)
    parser.add_argument("--scan-length", type=int, default=100)
    parser.add_argument(
        "--engines",
        default="rocksdb,sqlite,sqlite_sync_off,memory",
        help="comma-separated: rocksdb, sqlite, sqlite_sync_off, memory",
    )
    parser.add_argument("--stack", action="store_true", help="also through build_store's layers")
    parser.add_argument("--out", "--output", dest="out", help="also write the JSON here")
    args = parser.parse_args()

    engines = _engines([e.strip() for e in args.engines.split(",") if e.strip()], args.stack)
    started = time.perf_counter()
    data = make_data(args)
    runs: dict[str, list[dict]] = {e.name: [] for e in engines}
    order: list[list[str]] = []
    work = Path(tempfile.mkdtemp(prefix="sk-store-engines-", dir="/tmp"))
    try:
        for round_no in range(args.repeats):
            round_engines = engines if round_no % 2 == 0 else engines[::-1]
            order.append([e.name for e in round_engines])
            for engine in round_engines:
                result = run_engine(engine, data, args, work)
                runs[engine.name].append(result)
                log(
                    f"round {round_no + 1}/{args.repeats} {engine.name}: "
                    + ", ".join(f"{k} {result[k]}" for k in RATES)
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    metrics = RATES + TIMES
    medians = {
        name: {
            m: round(statistics.median(r[m] for r in results), _DIGITS.get(m[-3:]))
            for m in metrics
            if m in results[0]
        }
        for name, results in runs.items()
    }
    ratio_rounds: dict[str, dict[str, list[float]]] = {}
    if "rocksdb" in runs:
        base = runs["rocksdb"]
        for name, results in runs.items():
            if name == "rocksdb":
                continue
            ratio_rounds[name] = {
                m: [round(r[m] / b[m], 3) for r, b in zip(results, base, strict=True)]
                for m in metrics
                if m in results[0] and m in base[0] and all(b[m] for b in base)
            }
    ratios = {
        name: {m: round(statistics.median(rs), 3) for m, rs in per.items()}
        for name, per in ratio_rounds.items()
    }
    result = {
        "benchmark": "store_engines",
        "keys": args.keys,
        "key_bytes": len(data.keys[0]),
        "value_bytes": args.value_bytes,
        "commit_keys": args.commit_keys,
        "updates": len(data.updates),
        "gets": len(data.hits),
        "scans": args.scans,
        "scan_length": args.scan_length,
        "restore_batch": args.restore_batch,
        "repeats": args.repeats,
        "order": order,
        "medians": medians,
        "sqlite_vs_rocksdb": ratios.get("sqlite"),
        "ratios_vs_rocksdb": ratios,
        "ratios_vs_rocksdb_rounds": ratio_rounds,
        "runs": runs,
        "seconds": round(time.perf_counter() - started, 1),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "rocksdict": version("rocksdict"),
        "cpus": os.cpu_count(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
