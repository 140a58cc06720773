"""Throughput benchmark: a stateful count over 1M records / 100k keys / 4 partitions, on Spark.

One run produces the data once to an embedded broker and pushes it, one contender after
the other, through:
  statekeeper        StatekeeperApp (offset ranges through Spark, tasks read Kafka + RocksDB),
                     default settings (under backlog a task commits every 5 s)
  statekeeper_every_batch  the same with commit_interval_ms=0 (commits every micro-batch)
  statekeeper_in_memory  the same as statekeeper with the in-memory store (+ changelog)
  tws_pandas         transformWithStateInPandas, a per-key ValueState count (RocksDB provider)
  apply_in_pandas    applyInPandasWithState, a per-key count
  jvm_count          groupBy("key").count() in update mode to the noop sink (Spark's default
                     HDFS-backed state store: in memory, delta files every batch)
  jvm_count_rocksdb  the same on Spark's RocksDB state store provider
  raw_consume        tuned confluent-kafka consumers, one thread per partition, to EOF
The Spark peers read the same topic through the ``statekeeper_kafka`` Python data source.
Every contender in one comparison admits the same ``maxRecordsPerBatch``. Steady-state rates
exclude the first micro-batch (Python workers and state stores start there); from-start
rates divide all records by the wall time from query start to the last commit. Batch
latency is Spark's triggerExecution (trigger → commit). Peers too slow for 1M records read a
prefix topic holding the first ``--prefix-records`` records (same data, same keys); they run
after the fast contenders on what is left of ``--budget-s`` (reported ``complete:
false`` if cut short). The main pair (statekeeper, jvm_count) runs twice, in mirrored
order, and its rates pool both rounds. A second comparison runs statekeeper vs JVM count at
``--large-batch`` (each store kind). Correctness: each contender's final state must sum to
its record count.
Prints one JSON object on stdout, progress on stderr.
Usage: python benchmarks/throughput_bench.py [--records N] [--keys K] [--batch B] ...
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from process_memory import peak_rss_by_role  # this script's folder is on sys.path

from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.admin import ensure_topic, make_admin
from statekeeper.kafka.embedded import EmbeddedBroker

PARTITIONS = 4
TOPIC, PREFIX_TOPIC = "tput-input", "tput-input-prefix"
STORE = "counts"
#: Seconds kept back for the large-batch comparison while the slow peers run.
LARGE_RESERVE_S = 70.0
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_T0 = time.perf_counter()


def say(message: str) -> None:
    print(f"[{time.perf_counter() - _T0:6.1f}s] {message}", file=sys.stderr, flush=True)


# -- data ------------------------------------------------------------------------------------


#: Before each contender: wait (at most SETTLE_MAX_S) until the machine's CPUs were busy
#: less than SETTLE_BUSY_CORES cores over a SETTLE_WINDOW_S window. The JVM's JIT compiler
#: keeps compiling what the previous contender made hot for seconds after it stops (~0.1 s
#: of CPU per statekeeper batch measured right after the JVM warm-up), which would bill one
#: contender for another's compilation.
SETTLE_BUSY_CORES = 0.15
SETTLE_WINDOW_S = 0.5
SETTLE_MAX_S = 20.0


def _busy_jiffies() -> tuple[int, int] | None:
    """(busy, total) CPU jiffies of the whole machine, from /proc/stat (None elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def settle() -> float:
    """Wait until the machine is quiet (see SETTLE_BUSY_CORES); return the seconds waited."""
    started = time.perf_counter()
    cores = os.cpu_count() or 1
    while time.perf_counter() - started < SETTLE_MAX_S:
        before = _busy_jiffies()
        time.sleep(SETTLE_WINDOW_S)
        after = _busy_jiffies()
        if before is None or after is None:
            break
        busy, total = after[0] - before[0], after[1] - before[1]
        if total <= 0 or busy / total * cores < SETTLE_BUSY_CORES:
            break
    return round(time.perf_counter() - started, 2)


def key_ids(records: int, keys: int, seed: int = 7) -> Any:
    """Uniformly random keys, record i on partition i % 4 and key % 4 == partition, so every
    partition holds exactly records/4 records and a key always lands on one partition."""
    import numpy as np

    per_partition = keys // PARTITIONS
    slots = np.random.default_rng(seed).integers(0, per_partition, records)
    return slots * PARTITIONS + np.arange(records) % PARTITIONS


def produce(bootstrap: str, topic: str, ids: Any) -> float:
    """Produce one record per key id (key ``k%06d``, value the record number); seconds."""
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 20}))
    started = time.perf_counter()
    for i, key in enumerate(ids.tolist()):
        while True:
            try:
                producer.produce(topic, b"%d" % i, b"k%06d" % key, key % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60) != 0:
        raise RuntimeError(f"records to {topic} were not delivered")
    return time.perf_counter() - started


def raw_consume(bootstrap: str, topic: str, timeout_s: float = 60.0) -> tuple[int, float]:
    """Every partition to EOF, one tuned consumer per partition in parallel threads."""

    def one(p: int) -> int:
        consumer = Consumer(consumer_config(bootstrap, **{"fetch.wait.max.ms": 10}))
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
        n, deadline = 0, time.monotonic() + timeout_s
        try:
            while time.monotonic() < deadline:
                msgs = consumer.consume(20_000, 0.05)
                last = msgs[-1].error() if msgs else None
                if last is not None and last.code() == KafkaError._PARTITION_EOF:
                    return n + len(msgs) - 1
                n += len(msgs)
            raise TimeoutError(f"{topic}[{p}] not at EOF after {timeout_s}s")
        finally:
            consumer.close()

    started = time.perf_counter()
    with ThreadPoolExecutor(PARTITIONS) as pool:
        total = sum(pool.map(one, range(PARTITIONS)))
    return total, time.perf_counter() - started


# -- batch metrics -------------------------------------------------------------------------


def summarise(batches: list[dict[str, Any]], started: float, expected: int) -> dict[str, Any]:
    """Rates from per-batch ``records`` and ``seconds`` (trigger → commit) and ``end``
    (epoch seconds of the commit). Steady state excludes the first batch."""
    batches = [b for b in batches if b["records"] > 0]
    records = sum(b["records"] for b in batches)
    out: dict[str, Any] = {
        "records": records,
        "expected_records": expected,
        "complete": records >= expected,
        "batches": len(batches),
        "batch_records": [b["records"] for b in batches],
        "batch_seconds": [round(b["seconds"], 3) for b in batches],
        "first_batch_s": round(batches[0]["seconds"], 3) if batches else None,
        # includes worker/state start-up: a floor for the steady rate when only one batch ran
        "first_batch_rps": round(batches[0]["records"] / batches[0]["seconds"])
        if batches and batches[0]["seconds"]
        else None,
    }
    steady = batches[1:]
    steady_s = sum(b["seconds"] for b in steady)
    out["steady_rps"] = round(sum(b["records"] for b in steady) / steady_s) if steady_s else None
    wall = batches[-1]["end"] - started if batches else 0
    out["from_start_rps"] = round(records / wall) if wall > 0 else None
    out["from_start_seconds"] = round(wall, 3)
    if steady:
        secs = [b["seconds"] for b in steady]
        out["p50_batch_latency_s"] = round(statistics.median(secs), 3)
        out["max_batch_latency_s"] = round(max(secs), 3)
    # The last five full batches only: a contender whose JIT is still compiling its hot
    # paths speeds up across the run, and this is closer to where it settles.
    last = [b for b in steady if b["records"] == max(b["records"] for b in steady)][-5:]
    if len(last) == 5:
        out["last5_rps"] = round(sum(b["records"] for b in last) / sum(b["seconds"] for b in last))
    return out


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def progress_batches(progress: list[Any]) -> list[dict[str, Any]]:
    """Per-batch numbers of a Spark query from its StreamingQueryProgress objects."""
    out = []
    for p in sorted(progress, key=lambda p: p.batchId):
        trigger_ms = p.durationMs.get("triggerExecution", 0)
        out.append(
            {
                "batch_id": p.batchId,
                "records": p.numInputRows,
                "seconds": trigger_ms / 1000,
                "add_batch_s": p.durationMs.get("addBatch", 0) / 1000,
                "end": _epoch(p.timestamp) + trigger_ms / 1000,
                # Spark's driver phases (latestOffset, queryPlanning, walCommit, addBatch, ...)
                "durations_ms": dict(p.durationMs),
            }
        )
    return out


# -- Spark ---------------------------------------------------------------------------------


def session_conf() -> dict[str, str]:
    """The one session every contender runs on; the statekeeper runtime's checkpoint conf
    (in-process renames for local checkpoints) applies to the JVM and pandas peers too."""
    from statekeeper.spark.session_env import LOCAL_CHECKPOINT_CONF

    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(PARTITIONS),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.python.worker.reuse": "true",
        "spark.sql.streaming.stopTimeout": "60s",
        "spark.driver.memory": "4g",
        **LOCAL_CHECKPOINT_CONF,
    }


def spark_session() -> Any:
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("statekeeper-throughput-bench")
    for key, value in session_conf().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def kafka_frame(spark: Any, bootstrap: str, topic: str, batch: int) -> Any:
    """The topic as a streaming DataFrame with Spark's Kafka columns (worker A's source)."""
    return (
        spark.readStream.format("statekeeper_kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerBatch", str(batch))
        .load()
    )


def jvm_count(df: Any) -> Any:
    return df.groupBy("key").count()


def apply_in_pandas_count(df: Any) -> Any:
    from pyspark.sql.streaming.state import GroupStateTimeout

    def count(key: tuple[bytes], frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        n = sum(len(f) for f in frames)
        total = (state.get[0] if state.exists else 0) + n
        state.update((total,))
        yield pd.DataFrame({"key": [key[0]], "count": [total]})

    return (
        df.select("key")
        .groupBy("key")
        .applyInPandasWithState(
            count, "key binary, count long", "count long", "Update", GroupStateTimeout.NoTimeout
        )
    )


def tws_pandas_count(df: Any) -> Any:
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class CountProcessor(StatefulProcessor):
        """count(key) in a ValueState, emitted on every update."""

        def init(self, handle: Any) -> None:
            self.count = handle.getValueState(
                "count", StructType([StructField("count", LongType())])
            )

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Any:
            import pandas as pd

            n = sum(len(f) for f in rows)
            current = self.count.get()  # None when absent: one state call, not two
            total = (current[0] if current else 0) + n
            self.count.update((total,))
            yield pd.DataFrame({"key": [key[0]], "count": [total]})

        def close(self) -> None:
            pass

    return (
        df.select("key")
        .groupBy("key")
        .transformWithStateInPandas(CountProcessor(), "key binary, count long", "Update", "None")
    )


def run_peer(
    spark: Any,
    name: str,
    frame: Any,
    transform: Callable[[Any], Any],
    expected: int,
    checkpoint: Path,
    *,
    trigger_ms: int,
    timeout_s: float,
    provider: str | None = None,
) -> dict[str, Any]:
    """Start ``transform(frame)`` to the noop sink, stop once ``expected`` rows went through
    (or at ``timeout_s``), return its batch metrics."""
    # The statekeeper app sets WARN on the shared context; at WARN Spark's TWS state server
    # logs one line per absent ValueState, which would slow that peer down.
    spark.sparkContext.setLogLevel("ERROR")
    conf_key = "spark.sql.streaming.stateStore.providerClass"
    if provider:
        spark.conf.set(conf_key, provider)
    else:
        spark.conf.unset(conf_key)
    settled_s = settle()
    say(f"{name}: starting ({expected} records)")
    load_before = os.getloadavg()[0]
    started = time.time()
    query = (
        transform(frame)
        .writeStream.queryName(name)
        .format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{trigger_ms} milliseconds")
        .start()
    )
    deadline, seen, error = time.monotonic() + timeout_s, 0, None
    try:
        while time.monotonic() < deadline:
            if query.awaitTermination(0.2):
                error = str(query.exception())
                break
            rows = sum(p.numInputRows for p in query.recentProgress)
            if rows != seen:
                seen = rows
                say(f"{name}: {rows}/{expected} rows")
            if rows >= expected:
                break
    finally:
        query.stop()
        spark.conf.unset(conf_key)
    result = summarise(progress_batches(query.recentProgress), started, expected)
    result["load_avg_1m_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    result["settle_s"] = settled_s
    result["state_store_provider"] = (provider or "HDFSBackedStateStoreProvider").rsplit(".")[-1]
    if error:
        result["error"] = error
    if not result["complete"]:
        result["timed_out_after_s"] = timeout_s
    say(f"{name}: steady {result['steady_rps']} rec/s, from start {result['from_start_rps']}")
    result["peak_rss"] = peak_rss_by_role()  # every process so far, by role
    return result


def state_total(spark: Any, checkpoint: Path, column: str, **options: str) -> dict[str, Any]:
    """Sum and row count of a count column in a stopped query's state (state data source)."""
    from pyspark.sql import functions as F

    try:
        reader = spark.read.format("statestore")
        for k, v in options.items():
            reader = reader.option(k, v)
        row = (
            reader.load(str(checkpoint))
            .agg(F.sum(column).alias("total"), F.count(F.lit(1)).alias("keys"))
            .first()
        )
        return {"state_total": int(row["total"] or 0), "state_keys": int(row["keys"])}
    except Exception as exc:  # verification is best-effort; the rate stands without it
        return {"state_check_error": f"{type(exc).__name__}: {str(exc)[:200]}"}


# -- statekeeper -----------------------------------------------------------------------------


def count_topology(topic: str, store_type: str = "rocksdb") -> Any:
    from statekeeper.processing.dsl import Materialized, StreamsBuilder

    builder = StreamsBuilder()
    builder.stream(topic, key_serde="bytes", value_serde="bytes").group_by_key().count(
        Materialized.as_(STORE).with_store_type(store_type)  # type: ignore[arg-type]
    )
    return builder.build()


def run_statekeeper(
    bootstrap: str,
    topic: str,
    batch: int | None,
    expected: int,
    work: Path,
    *,
    trigger_ms: int,
    timeout_s: float,
    store_type: str = "rocksdb",
    commit_interval_ms: int | None = None,
    live: LiveInput | None = None,
) -> dict[str, Any]:
    """statekeeper over ``expected`` records of ``topic``: in ``batch``-record micro-batches,
    or (``batch`` None) with the default settings, adaptive batches. ``live``: once the
    backlog is done, input at a steady rate (the caught-up batches' latency)."""
    from statekeeper.app.statekeeper_app import StatekeeperApp
    from statekeeper.app.store_reader import read_store
    from statekeeper.settings import StatekeeperSettings

    label = "adaptive" if batch is None else str(batch)
    app_id = f"tput-{work.name}-{label}"  # own changelogs per run (warm-up, main, large)
    fixed = {} if batch is None else {"max_records_per_batch": batch, "adaptive_batches": False}
    settings = StatekeeperSettings(
        bootstrap_servers=bootstrap,
        application_id=app_id,
        state_dir=work / "state",
        checkpoint_dir=work / "checkpoints",
        trigger_interval_ms=trigger_ms,
        starting_offsets="earliest",
        status_port=None,
        **fixed,
        **({} if commit_interval_ms is None else {"commit_interval_ms": commit_interval_ms}),
    )
    topology = count_topology(topic, store_type)
    # The app keeps its last recent_batches batches: room for every batch of this run.
    app = StatekeeperApp(topology, settings, recent_batches=expected // (batch or 1_000) + 5_000)
    settled_s = settle()
    say(f"statekeeper: starting, {label} batches ({expected} records)")
    watchdog = threading.Timer(timeout_s, app.stop)
    watchdog.daemon = True
    watchdog.start()
    load_before = os.getloadavg()[0]
    started = time.time()
    feeder = None
    if live is not None:
        feeder = threading.Thread(target=live.feed_after, args=(app, expected), daemon=True)
        feeder.start()
    try:
        app.run(stop_when_idle=True, idle_s=1.0 if live is None else 3.0)
    finally:
        watchdog.cancel()
        if live is not None:
            live.stop.set()
            assert feeder is not None
            feeder.join(30)
    spark_batches = {b["batch_id"]: b for b in progress_batches(app.recent_progress)}
    batches = []
    for b in app.batches:
        p = spark_batches.get(b["batch_id"])
        batches.append(
            {
                "batch_id": b["batch_id"],
                "records": b["records"],
                # trigger → commit as Spark measured it, else the app's foreachBatch time
                "seconds": p["seconds"] if p else b["seconds"],
                "foreach_batch_s": b["seconds"],
                "end": p["end"] if p else b["finished_at"],
                "limit": b.get("records_limit"),
            }
        )
    live_batches = []
    if live is not None and live.first_batch_id is not None:
        # Batches after the one that finished the backlog are the caught-up phase.
        live_batches = [b for b in batches if b["batch_id"] >= live.first_batch_id]
        batches = [b for b in batches if b["batch_id"] < live.first_batch_id]
    result = summarise(batches, started, expected)
    if batch is None:
        result["batch_limits"] = [b["limit"] for b in batches if b["records"] > 0]
    result["driver_profile_ms_p50"] = driver_profile(
        [spark_batches.get(b["batch_id"]) for b in batches[1:]],
        [b for b in app.batches[1 : len(batches)] if "driver_s" in b],
    )
    if live is not None:
        result["live"] = live.summary(live_batches)
    # Task runs after the first batch that had to reopen their stores (Spark ran them in
    # another Python worker than the one holding them open).
    result["cold_task_runs_after_first"] = sum(
        b["tasks"] - b["warm_tasks"] for b in app.batches[1:]
    )
    result["load_avg_1m_before_after"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    result["settle_s"] = settled_s
    result["latency_source"] = (
        "spark triggerExecution" if len(spark_batches) >= len(app.batches) else "app foreachBatch"
    )
    fb = [b["foreach_batch_s"] for b in batches[1:] if b["records"]]
    if fb:
        result["steady_rps_foreach_batch_time"] = round(
            sum(b["records"] for b in batches[1:] if b["records"]) / sum(fb)
        )
    result["store_type"] = store_type
    result["commit_interval_ms"] = settings.commit_interval_ms
    if live is not None:
        # The state counts the live records too.
        result["records"] += live.sent
    t0 = time.perf_counter()
    counts = read_store(settings, topology, STORE, PARTITIONS)
    result["state_total"] = int(sum(counts.values()))
    result["state_keys"] = len(counts)
    result["state_read_s"] = round(time.perf_counter() - t0, 3)
    say(f"statekeeper: steady {result['steady_rps']} rec/s, from start {result['from_start_rps']}")
    result["peak_rss"] = peak_rss_by_role()  # every process so far, by role
    return result


def driver_profile(spark_batches: list[dict[str, Any] | None], app_batches: list[Any]) -> dict:
    """Where a batch's driver time goes (median ms over the steady batches): Spark's phases
    of the trigger (its progress' ``durationMs``; ``addBatch`` is foreachBatch) and, inside
    ``addBatch``, the app's (``driver_s``: ranges, plan, execute, record)."""
    out: dict[str, float] = {}
    spark = [b["durations_ms"] for b in spark_batches if b]
    for key in sorted({k for d in spark for k in d}):
        out[f"spark.{key}"] = round(statistics.median(d.get(key, 0) for d in spark), 1)
    phases = [b["driver_s"] for b in app_batches]
    for key in sorted({k for d in phases for k in d}):
        out[f"app.{key}"] = round(statistics.median(d.get(key, 0) for d in phases) * 1000, 1)
    return out


class LiveInput:
    """Input at a steady rate once an app has processed its backlog: the caught-up phase,
    whose batches show the latency a running app adds (records of the existing keys)."""

    def __init__(self, bootstrap: str, topic: str, ids: Any, rate: int, seconds: float) -> None:
        self.bootstrap, self.topic, self.ids = bootstrap, topic, ids
        self.rate, self.seconds = rate, seconds
        self.stop = threading.Event()
        self.started_at: float | None = None
        #: The first batch that may hold live records (every earlier one was done before).
        self.first_batch_id: int | None = None
        self.sent = 0

    def feed_after(self, app: Any, backlog: int) -> None:
        """Wait (bounded by the app's run) until ``app`` processed ``backlog`` records, then
        send ``rate`` records/s for ``seconds`` in 100 ms slices."""
        while not self.stop.is_set() and sum(b["records"] for b in app.batches) < backlog:
            time.sleep(0.05)
        if self.stop.is_set():
            return
        producer = Producer(producer_config(self.bootstrap, **{"linger.ms": 5}))
        self.first_batch_id = max(b["batch_id"] for b in app.batches) + 1
        self.started_at = time.time()
        ids = self.ids.tolist()
        per_slice = max(1, self.rate // 10)
        for slice_no in range(int(self.seconds * 10)):
            if self.stop.is_set():
                break
            for _ in range(per_slice):
                key = ids[self.sent % len(ids)]
                producer.produce(self.topic, b"live", b"k%06d" % key, key % PARTITIONS)
                self.sent += 1
            producer.poll(0)
            pause = self.started_at + (slice_no + 1) / 10 - time.time()
            if pause > 0:
                time.sleep(pause)
        producer.flush(30)

    def summary(self, batches: list[dict[str, Any]]) -> dict[str, Any]:
        """The caught-up phase: its rate, and its batches' latency (trigger → commit)."""
        secs = [b["seconds"] for b in batches if b["records"] > 0]
        return {
            "rate_rps": self.rate,
            "seconds": self.seconds,
            "records_sent": self.sent,
            "batches": len(secs),
            "p50_batch_latency_s": round(statistics.median(secs), 3) if secs else None,
            "max_batch_latency_s": round(max(secs), 3) if secs else None,
            "batch_records_median": statistics.median(
                [b["records"] for b in batches if b["records"] > 0]
            )
            if secs
            else None,
        }


# -- main ------------------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None


class Budget:
    """Wall-clock budget of the whole run: the slow peers get what is left."""

    def __init__(self, seconds: float) -> None:
        self.deadline = time.monotonic() + seconds

    def left(self, reserve_s: float = 0.0) -> float:
        return self.deadline - time.monotonic() - reserve_s


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument(
        "--prefix-records",
        type=int,
        default=100_000,
        help="records read by the slow Python stateful peers (a prefix of the same data)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=50_000,
        help="maxRecordsPerBatch of the main comparison (every contender)",
    )
    parser.add_argument(
        "--large-batch",
        type=int,
        default=250_000,
        help="maxRecordsPerBatch of the statekeeper vs JVM count comparison (0 skips it)",
    )
    parser.add_argument("--trigger-ms", type=int, default=100)
    parser.add_argument(
        "--budget-s",
        type=float,
        default=690.0,
        help="wall-clock budget; the slow peers stop early (reported incomplete) to keep it",
    )
    parser.add_argument("--timeout-s", type=float, default=180.0, help="cap per contender")
    parser.add_argument(
        "--skip",
        default="",
        help="comma list of: sk,sk-every-batch,sk-memory,jvm,jvm-rocksdb,large,tws,apply,adaptive",
    )
    parser.add_argument(
        "--live-rate",
        type=int,
        default=20_000,
        help="records/s of the caught-up phase after the adaptive contenders' backlog",
    )
    parser.add_argument("--live-s", type=float, default=15.0, help="seconds of that phase")
    parser.add_argument(
        "--no-warmup",
        dest="warmup",
        action="store_false",
        help="skip the unmeasured warm-up run of statekeeper and JVM count over the prefix",
    )
    parser.add_argument(
        "--warmup-batch",
        type=int,
        default=2_000,
        help="maxRecordsPerBatch of the warm-up: 50 batches per fast contender over the prefix. "
        "The JIT compiles per-batch code by how often it ran, so the number of batches is what "
        "warms it; with 10 warm-up batches it still took ~0.2 s of CPU per measured batch",
    )
    parser.add_argument(
        "--quix-python",
        help="a Python with quixstreams installed (make bench-throughput makes .venv-quix): "
        "runs the Quix Streams peer (benchmarks/quix_peer.py) on the same broker and data",
    )
    parser.add_argument("--output", help="also write the JSON here")
    return parser.parse_args()


#: Adaptive batches (the defaults) and fixed 250k-record batches, each over its own copy of
#: the input with a live phase after the backlog.
ADAPTIVE = (
    ("statekeeper_adaptive", None, "tput-input-adaptive"),
    ("statekeeper_fixed_250k", 250_000, "tput-input-fixed"),
)

FAST = (
    # name, --skip flag, statekeeper store type or JVM state store provider, statekeeper's
    # commit_interval_ms (None: the default, 5 s)
    ("statekeeper", "sk", "rocksdb", None),
    ("jvm_count", "jvm", None, None),
    # Commits every micro-batch, backlog or not.
    ("statekeeper_every_batch", "sk-every-batch", "rocksdb", 0),
    ("statekeeper_in_memory", "sk-memory", "in_memory", None),
    ("jvm_count_rocksdb", "jvm-rocksdb", ROCKSDB_PROVIDER, None),
)
#: The main pair (the first two of FAST) runs a second time in mirrored order at the end
#: (A B ... B A): the speed of this VM drifts by up to ~25 % within minutes (measured), and
#: a mirrored order keeps a steady drift from favouring either.
ROUND2 = "_round2"


def run_fast(
    spark: Any,
    bootstrap: str,
    batch: int,
    records: int,
    work: Path,
    skip: set[str],
    opts: Callable[..., dict[str, Any]],
    *,
    split: bool = False,
    mirrored: bool = False,
) -> dict[str, dict[str, Any]]:
    """Statekeeper on each store kind and the JVM count on each state store provider, at one
    batch size; with ``split`` they share what is left of the budget equally, with
    ``mirrored`` the main pair runs again at the end in reverse order (see ROUND2)."""
    todo = [c for c in FAST if c[1] not in skip]
    if mirrored:
        pair = [c for c in FAST[:2] if c[1] not in skip]
        todo += [(name + ROUND2, *rest) for name, *rest in reversed(pair)]
    out: dict[str, dict[str, Any]] = {}
    for i, (name, _, kind, commit_interval_ms) in enumerate(todo):
        limits = opts(1.0 / (len(todo) - i)) if split else opts()
        path = work / name
        if name.startswith("statekeeper"):
            out[name] = run_statekeeper(
                bootstrap,
                TOPIC,
                batch,
                records,
                path,
                store_type=kind,
                commit_interval_ms=commit_interval_ms,
                **limits,
            )
        else:
            frame = kafka_frame(spark, bootstrap, TOPIC, batch)
            out[name] = run_peer(
                spark, f"{name}_{batch}", frame, jvm_count, records, path, provider=kind, **limits
            )
            out[name].update(state_total(spark, path, "value.count"))
    return out


def adaptive_ratios(
    c: dict[str, dict[str, Any]], raw_rps: float, large: dict[str, Any]
) -> dict[str, Any] | None:
    """Adaptive batches (default settings) against raw consume, the JVM count at both batch
    sizes, and fixed 250k batches; caught-up latency against the fixed batches'."""
    adaptive, fixed = c.get("statekeeper_adaptive"), c.get("statekeeper_fixed_250k")
    if not adaptive:
        return None
    jvm = pooled_steady_rps(c.get("jvm_count"), c.get("jvm_count" + ROUND2))
    jvm_rounds = [c.get(n, {}).get("steady_rps") for n in ("jvm_count", "jvm_count" + ROUND2)]
    rps = adaptive.get("steady_rps")

    def p50(run: dict[str, Any] | None) -> Any:
        return ((run or {}).get("live") or {}).get("p50_batch_latency_s")

    return {
        "steady_rps": rps,
        "from_start_rps": adaptive.get("from_start_rps"),
        "vs_raw_consume": ratio(rps, raw_rps),
        "from_start_vs_raw_consume": ratio(adaptive.get("from_start_rps"), raw_rps),
        "vs_jvm_count_50k": ratio(rps, jvm),
        "vs_jvm_count_50k_rounds": [ratio(rps, r) for r in jvm_rounds if r],
        "vs_jvm_count_large": ratio(rps, (large.get("jvm_count") or {}).get("steady_rps")),
        "vs_fixed_250k": ratio(rps, (fixed or {}).get("steady_rps")),
        "caught_up_p50_batch_latency_s": p50(adaptive),
        "fixed_250k_caught_up_p50_batch_latency_s": p50(fixed),
        "batch_limits": adaptive.get("batch_limits"),
    }


def pooled_steady_rps(*runs: dict[str, Any] | None) -> int | None:
    """The steady rate of several runs of one contender taken together: all their records
    after each run's first batch over all their seconds."""
    records = seconds = 0.0
    for run in runs:
        if run:
            records += sum(run["batch_records"][1:])
            seconds += sum(run["batch_seconds"][1:])
    return round(records / seconds) if seconds else None


def fast_ratios(c: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Rates and ratios of :func:`run_fast`'s contenders: statekeeper's default store against
    Spark's default, and like for like by store kind (both in memory with a durable log, both
    on RocksDB). The main pair's rates pool both mirrored rounds when there are two."""

    def get(name: str, key: str = "steady_rps") -> Any:
        return c.get(name, {}).get(key)

    sk, jvm = "statekeeper", "jvm_count"
    sk_rps = pooled_steady_rps(c.get(sk), c.get(sk + ROUND2))
    jvm_rps = pooled_steady_rps(c.get(jvm), c.get(jvm + ROUND2))
    out = {
        "statekeeper_rps": sk_rps,
        "statekeeper_every_batch_rps": get("statekeeper_every_batch"),
        "statekeeper_in_memory_rps": get("statekeeper_in_memory"),
        "jvm_count_rps": jvm_rps,
        "jvm_count_rocksdb_rps": get("jvm_count_rocksdb"),
        "statekeeper_from_start_rps": get(sk, "from_start_rps"),
        "jvm_count_from_start_rps": get(jvm, "from_start_rps"),
        "statekeeper_p50_batch_latency_s": get(sk, "p50_batch_latency_s"),
        "statekeeper_vs_jvm": ratio(sk_rps, jvm_rps),
        "statekeeper_vs_jvm_last5": ratio(get(sk, "last5_rps"), get(jvm, "last5_rps")),
        "statekeeper_vs_jvm_from_start": ratio(
            get(sk, "from_start_rps"), get(jvm, "from_start_rps")
        ),
        "statekeeper_every_batch_vs_jvm": ratio(get("statekeeper_every_batch"), jvm_rps),
        "statekeeper_in_memory_vs_jvm": ratio(get("statekeeper_in_memory"), jvm_rps),
        "statekeeper_vs_jvm_rocksdb": ratio(sk_rps, get("jvm_count_rocksdb")),
    }
    if sk + ROUND2 in c or jvm + ROUND2 in c:
        out["statekeeper_rounds_rps"] = [get(sk), get(sk + ROUND2)]
        out["jvm_count_rounds_rps"] = [get(jvm), get(jvm + ROUND2)]
        out["statekeeper_vs_jvm_rounds"] = [
            ratio(get(sk), get(jvm)),
            ratio(get(sk + ROUND2), get(jvm + ROUND2)),
        ]
    return out


def run_contenders(
    args: argparse.Namespace, bootstrap: str, work: Path, budget: Budget, ids: Any
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Every Spark contender, one after the other on one session: the main comparison
    (statekeeper and JVM count first, then the slow Python stateful peers on what is left of
    the budget minus a reserve), then the large-batch comparison."""
    skip = set(filter(None, args.skip.split(",")))
    run_large = bool(args.large_batch) and "large" not in skip
    spark = spark_session()
    from statekeeper.spark.kafka_source import register_sources

    register_sources(spark)
    # Warm-up, so the first contender does not pay alone for starting the session's Python
    # workers and importing the Kafka client stack: a batch read of the prefix topic through
    # the same source (which also checks that the source sees every record).
    seen = (
        spark.read.format("statekeeper_kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", PREFIX_TOPIC)
        .option("startingOffsets", "earliest")
        .load()
        .count()
    )
    if seen != args.prefix_records:
        raise RuntimeError(f"statekeeper_kafka read {seen} of {args.prefix_records} records")
    if args.warmup:
        # Statekeeper and the JVM count on each state store provider once over the prefix,
        # results dropped, in many small batches: the JVM's JIT has then compiled the
        # per-batch paths (planning, scheduling, commits) and the streaming aggregation, and
        # Python workers run the runtime. With 10 warm-up batches the C2 compiler still took
        # ~0.2 s of CPU per measured batch and both kept speeding up while measured.
        started = time.perf_counter()
        run_statekeeper(
            bootstrap,
            PREFIX_TOPIC,
            args.warmup_batch,
            args.prefix_records,
            work / "warm-sk",
            trigger_ms=args.trigger_ms,
            timeout_s=60.0,
        )
        jvm_runs = [c for c in FAST if c[0].startswith("jvm") and c[1] not in skip]
        for _, _, provider, _ in jvm_runs:
            run_peer(
                spark,
                "jvm_count_warmup",
                kafka_frame(spark, bootstrap, PREFIX_TOPIC, args.warmup_batch),
                jvm_count,
                args.prefix_records,
                work / f"warm-jvm-{'rocksdb' if provider else 'hdfs'}",
                trigger_ms=args.trigger_ms,
                timeout_s=60.0,
                provider=provider,
            )
        say(f"warm-up done in {time.perf_counter() - started:.1f}s")
    say("spark session ready")

    def opts(share: float = 1.0, reserve_s: float = 0.0) -> dict[str, Any]:
        left = max(20.0, budget.left(reserve_s=15.0 + reserve_s) * share)
        return {"trigger_ms": args.trigger_ms, "timeout_s": min(args.timeout_s, left)}

    def frame(topic: str, batch: int) -> Any:
        return kafka_frame(spark, bootstrap, topic, batch)

    results: dict[str, dict[str, Any]] = {}
    large: dict[str, Any] = {"batch_records": args.large_batch}
    n, prefix = args.records, args.prefix_records
    results.update(
        run_fast(spark, bootstrap, args.batch, n, work / "main", skip, opts, mirrored=True)
    )
    if "adaptive" not in skip:
        # Default settings (adaptive batches) against fixed 250k batches (the default before),
        # each on its own copy of the input: its live phase appends to it.
        for name, batch, topic in ADAPTIVE:
            live = LiveInput(bootstrap, topic, ids, args.live_rate, args.live_s)
            results[name] = run_statekeeper(
                bootstrap, topic, batch, n, work / name, live=live, **opts()
            )
    reserve = LARGE_RESERVE_S if run_large else 0.0
    if "tws" not in skip:
        # transformWithStateInPandas is the slowest (~0.7-0.9k rows/s): 60 % of what is left.
        results["tws_pandas"] = run_peer(
            spark,
            "tws_pandas",
            frame(PREFIX_TOPIC, args.batch),
            tws_pandas_count,
            prefix,
            work / "tws",
            provider=ROCKSDB_PROVIDER,
            **opts(0.6 if "apply" not in skip else 1.0, reserve),
        )
        results["tws_pandas"].update(
            state_total(spark, work / "tws", "value.count", stateVarName="count")
        )
    if "apply" not in skip:
        results["apply_in_pandas"] = run_peer(
            spark,
            "apply_in_pandas",
            frame(PREFIX_TOPIC, args.batch),
            apply_in_pandas_count,
            prefix,
            work / "apply",
            **opts(1.0, reserve),
        )
        results["apply_in_pandas"].update(
            state_total(spark, work / "apply", "value.groupState.count")
        )
    if run_large:
        large.update(
            run_fast(spark, bootstrap, args.large_batch, n, work / "large", skip, opts, split=True)
        )
        large.update(fast_ratios(large))
    spark.stop()
    return results, large


QUIX_TOPIC = "tput-input-quix"


def run_quix(
    args: argparse.Namespace,
    bootstrap: str,
    admin: Any,
    work: Path,
    ids: Any,
    distinct_keys: int,
) -> dict[str, Any]:
    """The Quix Streams peer: its count over a copy of the input, then its recovery of that
    state from its changelog, each phase a process of its own (peak RSS per phase)."""
    # Quix derives its changelog's retention from the input topic's retention.ms, which
    # the broker reports only when the topic was created with it.
    ensure_topic(admin, QUIX_TOPIC, PARTITIONS, {"retention.ms": "-1", "retention.bytes": "-1"})
    produce(bootstrap, QUIX_TOPIC, ids)
    script = Path(__file__).with_name("quix_peer.py")
    phases: dict[str, Any] = {}
    for phase in ("process", "recover"):
        say(f"quix: {phase}")
        command = [args.quix_python, str(script), phase, "--bootstrap", bootstrap]
        command += ["--topic", QUIX_TOPIC, "--group", "quix-bench"]
        command += ["--state-dir", str(work / f"quix-{phase}")]
        command += ["--records", str(args.records), "--keys", str(distinct_keys)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout_s + 120)
        if done.returncode:
            return {"error": f"{phase} exited {done.returncode}: {done.stderr[-2000:]}"}
        phases[phase] = json.loads(done.stdout.strip().splitlines()[-1])
    return phases


def main() -> None:
    args = parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    budget = Budget(args.budget_s)
    wall_started = time.perf_counter()
    load_before = os.getloadavg()
    work = Path(tempfile.mkdtemp(prefix="sk-throughput-bench-"))
    result: dict[str, Any] = {
        "benchmark": "throughput",
        "records": args.records,
        "keys": args.keys,
        "partitions": PARTITIONS,
        "batch_records": args.batch,
        "large_batch_records": args.large_batch,
        "prefix_records": args.prefix_records,
        "trigger_ms": args.trigger_ms,
        "warmup": args.warmup,
        "warmup_batch_records": args.warmup_batch if args.warmup else None,
        "spark_master": "local[2]",
        "spark_conf": {k: v for k, v in session_conf().items() if "python" not in k},
    }
    try:
        with EmbeddedBroker() as broker:
            bootstrap = broker.bootstrap_servers
            admin = make_admin(bootstrap)
            ensure_topic(admin, TOPIC, PARTITIONS)
            ensure_topic(admin, PREFIX_TOPIC, PARTITIONS)
            ids = key_ids(args.records, args.keys)
            result["distinct_keys"] = len(set(ids.tolist()))
            say(f"producing {args.records} records ({result['distinct_keys']} distinct keys)")
            result["produce_rps"] = round(args.records / produce(bootstrap, TOPIC, ids))
            produce(bootstrap, PREFIX_TOPIC, ids[: args.prefix_records])
            if "adaptive" not in args.skip.split(","):
                for _, _, topic in ADAPTIVE:
                    ensure_topic(admin, topic, PARTITIONS)
                    produce(bootstrap, topic, ids)

            raw = [raw_consume(bootstrap, TOPIC) for _ in range(2)]
            raw_n, raw_s = min(raw, key=lambda r: r[1])
            result["raw_consume_rps"] = round(raw_n / raw_s)
            result["raw_consume_runs_rps"] = [round(n / s) for n, s in raw]
            result["raw_consume_records"] = raw_n
            say(f"raw consume {result['raw_consume_rps']} rec/s")

            contenders, large = run_contenders(args, bootstrap, work, budget, ids)
            if args.quix_python:
                result["quix"] = run_quix(
                    args, bootstrap, admin, work, ids, result["distinct_keys"]
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def get(name: str, key: str) -> Any:
        return contenders.get(name, {}).get(key)

    result.update(fast_ratios(contenders))
    sk_rps, raw_rps = result["statekeeper_rps"], result["raw_consume_rps"]
    result.update(
        tws_pandas_rps=get("tws_pandas", "steady_rps"),
        apply_in_pandas_rps=get("apply_in_pandas", "steady_rps"),
        tws_pandas_from_start_rps=get("tws_pandas", "from_start_rps"),
        apply_in_pandas_from_start_rps=get("apply_in_pandas", "from_start_rps"),
        raw_consume_from_start_rps=raw_rps,
        statekeeper_vs_tws=ratio(sk_rps, get("tws_pandas", "steady_rps")),
        statekeeper_vs_apply_in_pandas=ratio(sk_rps, get("apply_in_pandas", "steady_rps")),
        statekeeper_vs_raw=ratio(sk_rps, raw_rps),
        statekeeper_vs_tws_from_start=ratio(
            get("statekeeper", "from_start_rps"), get("tws_pandas", "from_start_rps")
        ),
        records_per_contender={
            "raw_consume": result["raw_consume_records"],
            **{name: c["records"] for name, c in contenders.items()},
        },
        all_complete=all(c["complete"] for c in contenders.values()),
        state_checks_ok=all(
            c.get("state_total") == c["records"]
            for c in [*contenders.values(), *(large.get(name, {}) for name, *_ in FAST)]
            if c
        ),
        adaptive=adaptive_ratios(contenders, raw_rps, large),
        statekeeper_vs_quix=ratio(
            sk_rps, result.get("quix", {}).get("process", {}).get("steady_rps")
        ),
        large_batch=large,
        contenders=contenders,
        seconds=round(time.perf_counter() - wall_started, 1),
        load_average_before_after=[round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        python=platform.python_version(),
        cpus=os.cpu_count(),
    )
    text = json.dumps(result, indent=2)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")


if __name__ == "__main__":
    main()
