"""Failover with and without a standby, and interactive queries under processing, end to end.

Everything runs on a real two-worker Spark standalone cluster on this machine
(:class:`~statekeeper.cluster.local_cluster.LocalSparkCluster`, 1 core per worker) and the
embedded broker, with one app whose single task counts records by key
(``benchmarks/failover_topology.py``; one input partition, so one task and one store).

Failover (twice in the same run, same data: ``num_standby_replicas`` 1, then 0):
  load ``--keys`` distinct keys (one record each) and wait until the app drained them; a
  trickle of updates to existing keys (``--trickle-rps``) keeps micro-batches (and so the
  executors' reports in the status document) flowing; with a standby, wait until the status
  shows its lag 0; then kill -9 the worker whose executor runs the task. Reported per case:
  ``restore_seconds`` / ``restore_records`` / ``restore_source``: the task's restore of the
  store on the surviving executor (its status ``restore`` report), and
  ``end_to_end_seconds``: the kill to the first micro-batch finished with the task on the
  survivor (``last_batch.finished_at``).

Host frozen (``--scenarios frozen``; same load, same two cases, but the trickle's updates
count: value ``b""``, where the kill cases' trickle sends null values, which the count drops,
so their store does not change after the load): instead of the kill, every process of that
worker's host is stopped with SIGSTOP (``LocalSparkCluster.freeze_worker``: worker JVM,
executor JVM, pyspark daemon and Python workers keep their sockets and state but do not
run), so the driver notices only through its timeouts. The app runs with the Spark confs it
sets itself (``--failover-conf app``, the default) or with
``statekeeper.spark.session_env.CLUSTER_FAILOVER_CONF`` put in its spec (``explicit``); the
cluster with its ``spark.worker.timeout``. The freeze comes once the task's Python worker is
in the middle of a batch (``--freeze-when busy``, the default; at most 20 s of waiting, as
the cluster tests freeze) or at once (``any``, as the kill). Reported per case, in seconds
from the freeze: ``executor_lost_seconds`` (the driver's log first says the executor is
lost), ``moved_seconds`` (the status document places the task elsewhere) and
``end_to_end_seconds`` (the first batch finished with the task on the survivor), plus the
restore as above. Then the worker is thawed (always, also on errors) and ``after_thaw``
records, each wait bounded by ``--recover-timeout-s``: when the worker was ALIVE at the
master again, when the app had two executors again and finished a batch, what the task's
frozen Python worker did after the thaw (CPU, how long it lived), the input drained after
the trickle stopped, the status document's ``fencing`` counts, and ``store_check``: the
store rebuilt from its changelog in a fresh directory compared with the counts the load and
the trickle imply (the thawed "zombie" must not have changed it).

Queries (a third app on the same cluster, ``query_port=0``, no standby): the store is loaded
with ``--query-keys`` keys, then a backlog of ``--backlog`` updates to them is produced and the
app processes it while windows of ``--window-s`` seconds alternate without and with a bounded
point-get load (``--query-threads`` client threads sharing a total rate cap, loopback only)
against the active executor's query server, for keys that exist. After one unmeasured window,
each cap of ``--query-rps`` gets ``--pairs`` off/on pairs in ABBA order, then
``--control-pairs`` pairs run with no reads in either window (``query_control_pair_ratios``:
how far apart two adjacent windows land when nothing differs). Each ABBA block of four
windows also gets one ratio, its middle two windows' rate ÷ its outer two's
(``block_ratios``; with reads ÷ without, as a drift that is linear over the block cancels;
``query_control_block_ratios``: the same of the control windows). ``--burn-pairs`` pairs
follow with no reads either, one window of each running a plain busy loop of
``--burn-cores`` cores instead (``query_burn_block_ratios``: what that much CPU alone
costs the app on this machine). Each window has ``cores_by_role``: the cores the app's
Python workers, the broker, the service process, this script (the query clients) and the
JVMs kept busy in it. The read load's clients are plain sockets by default
(``--query-client raw``): they stand for other machines, and here their CPU competes with
the app; ``--query-client library`` uses statekeeper's ``QueryClient`` instead.
Processing rates come from the status document's processed-record counts and times at each
window's edges (windows in which the backlog ran out are left out). The headline query
figures are the highest cap's; ``query_by_rate`` has each cap's. The whole query phase runs
once per ``--query-services`` mode, each with an app of its own: ``in_worker`` (the query
server in a Python worker that runs tasks too) and ``process``
(``executor_services_process``: a process of its own); ``query_by_services`` has each
mode's summary, the headline figures are the last mode's.

``--scenarios`` (or env ``STATEKEEPER_BENCH_SCENARIOS``) picks what runs, comma-separated
from ``killed``, ``frozen`` and ``queries`` (default: all three, in that order).

Prints one JSON object on stdout, progress on stderr: ``scenarios.worker_killed`` (also
under ``failover``, its key in earlier runs) and ``scenarios.host_frozen``, each with
``with_standby`` and ``without_standby``; the headline figures at the top level. Usage:
python benchmarks/failover_bench.py [--scenarios frozen] [--keys N] [--query-keys N] ...
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import yaml
from confluent_kafka import Producer
from frozen_host import (  # this script's folder is on sys.path
    LostExecutorWatch,
    ZombieWatch,
    executor_network_conf,
    expected_counts,
    verify_counts,
    wait_busy,
)
from process_cpu import cores_by_role, cpu_snapshot  # this script's folder is on sys.path

from statekeeper.cluster.local_cluster import ClusterConfig, LocalSparkCluster
from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.admin import ensure_topic, make_admin
from statekeeper.kafka.embedded import EmbeddedBroker
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.query.client import QueryAnswer, QueryClient
from statekeeper.testing.app_process import AppProcess

TOPOLOGY = Path(__file__).resolve().parent / "failover_topology.py"
STORE = "key-counts"
TASK = "0_0"
RESTORE_TARGET = 20.0  # the goal: a standby's restore 20x faster than a full replay


def log(message: str) -> None:
    """Progress goes to stderr so stdout holds only the JSON."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def key_of(i: int) -> str:
    return f"k{i:07d}"


def produce_keys(bootstrap: str, topic: str, indexes: range | list[int]) -> None:
    """One record per index, keyed ``key_of(index)``, value empty."""
    producer = Producer(producer_config(bootstrap, **{"linger.ms": 20}))
    for n, i in enumerate(indexes):
        while True:
            try:
                producer.produce(topic, key=key_of(i).encode(), value=b"")
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.05)
        if n % 50_000 == 0:
            producer.poll(0)
    producer.flush()


class Trickle(threading.Thread):
    """Updates to existing keys at a steady rate, so micro-batches keep running.

    With ``value`` None (the "worker killed" cases) the records have null values, which the
    count drops (as Kafka Streams' aggregations do): batches run, the store does not change.
    With a value (``b""``: the "host frozen" cases) each record counts, so the store, its
    changelog and the standby's copy change all the time."""

    def __init__(
        self, bootstrap: str, topic: str, keys: int, rps: int, value: bytes | None = None
    ) -> None:
        super().__init__(daemon=True, name="trickle")
        self.bootstrap, self.topic, self.keys, self.rps = bootstrap, topic, keys, rps
        self.value = value
        self.stop_event = threading.Event()
        self.produced = 0

    def run(self) -> None:
        rng = random.Random(7)
        producer = Producer(producer_config(self.bootstrap, **{"linger.ms": 5}))
        per_tick = max(1, self.rps // 4)
        while not self.stop_event.wait(0.25):
            for _ in range(per_tick):
                key = key_of(rng.randrange(self.keys)).encode()
                producer.produce(self.topic, key=key, value=self.value)
            self.produced += per_tick
            producer.poll(0)
        producer.flush()


def write_spec(
    work: Path, app_id: str, topic: str, spark_conf: dict[str, str] | None = None
) -> Path:
    spec: dict[str, Any] = {
        "application_id": app_id,
        "topology": f"{TOPOLOGY}:build_topology",
        "params": {"input_topic": topic},
        "settings": {},
    }
    if spark_conf:
        spec["spark"] = {"conf": dict(spark_conf)}
    path = work / f"{app_id}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def start_app(
    work: Path,
    cluster: LocalSparkCluster,
    bootstrap: str,
    name: str,
    topic: str,
    spark_conf: dict[str, str] | None = None,
    **settings: Any,
) -> AppProcess:
    app_dir = work / name
    app_dir.mkdir(parents=True)
    overrides = {
        "bootstrap_servers": bootstrap,
        "state_dir": str(app_dir / "state"),  # the driver's; executors use their worker's
        "checkpoint_dir": str(app_dir / "checkpoints"),
        "status_file": str(app_dir / "status.json"),
        "status_port": None,
        "spark_master": cluster.master_url,
        "restore_from_snapshots": False,  # without a standby: a full replay, not a snapshot
        "trigger_interval_ms": 200,
        "lock_timeout_s": 60,
        **settings,
    }
    spec = write_spec(app_dir, f"failover-bench-{name}", topic, spark_conf)
    return AppProcess(spec, overrides, app_dir / "app.log", stop_when_idle=False).start()


def drained(status: dict[str, Any]) -> bool:
    parts = status.get("source_partitions") or []
    return bool(parts) and all(p["position"] >= p["end"] for p in parts)


def active_executor(status: dict[str, Any]) -> str | None:
    return ((status.get("placement") or {}).get("tasks") or {}).get(TASK, {}).get("executor")


def standby_lag(status: dict[str, Any]) -> dict[str, Any]:
    """The task's standby copies: executor -> lag per store (None while unknown)."""
    lags = ((status.get("placement") or {}).get("standby_lag") or {}).get(TASK) or {}
    return {ex: (info or {}).get("lag") for ex, info in lags.items()}


def standby_current(status: dict[str, Any]) -> bool:
    lags = standby_lag(status)
    return bool(lags) and all(lag and all(v == 0 for v in lag.values()) for lag in lags.values())


def worker_running_task(cluster: LocalSparkCluster, status: dict[str, Any]) -> int:
    """The worker whose processes include the Python worker that ran the task last."""
    pid = (status.get("tasks") or {}).get(TASK, {}).get("worker_pid")
    for worker in cluster.workers:
        if pid in cluster.worker_processes(worker.index):
            return worker.index
    raise RuntimeError(f"no worker runs {TASK}'s Python worker (pid {pid})")


def wait_for(
    proc: AppProcess, what: str, predicate: Callable[[dict[str, Any]], bool], timeout_s: float
) -> dict[str, Any]:
    log(f"waiting for {what}")
    return proc.wait_for(predicate, timeout_s)


def store_restore(status: dict[str, Any]) -> dict[str, Any]:
    reports = (status.get("tasks") or {}).get(TASK, {}).get("restore") or []
    return next((r for r in reports if r.get("store") == STORE), {})


def start_case(
    work: Path,
    cluster: LocalSparkCluster,
    bootstrap: str,
    name: str,
    standbys: int,
    args: Any,
    spark_conf: dict[str, str] | None = None,
    trickle_value: bytes | None = None,
) -> tuple[AppProcess, Trickle]:
    """A failover case's input topic loaded with ``--keys`` keys, its app started and its
    trickle made (not started)."""
    topic = f"keys-{name}"
    ensure_topic(make_admin(bootstrap), topic, 1, {})
    log(f"[{name}] producing {args.keys:,} distinct keys")
    produce_keys(bootstrap, topic, range(args.keys))
    proc = start_app(
        work,
        cluster,
        bootstrap,
        name,
        topic,
        spark_conf,
        num_standby_replicas=standbys,
        max_records_per_batch=args.batch_records,
    )
    return proc, Trickle(bootstrap, topic, args.keys, args.trickle_rps, trickle_value)


def ready_for_fault(
    proc: AppProcess, trickle: Trickle, name: str, standbys: int, args: Any
) -> tuple[float, dict[str, Any]]:
    """Wait until the keys are processed, start the trickle, wait for two executors (and the
    standby's lag 0), let ``--settle-s`` pass; the load's seconds and the status then."""
    started = time.monotonic()
    wait_for(proc, f"[{name}] the {args.keys:,} keys processed", drained, 900)
    load_s = time.monotonic() - started
    trickle.start()
    wait_for(proc, f"[{name}] two executors", lambda s: len(_executors(s)) >= 2, 120)
    if standbys:
        before = wait_for(proc, f"[{name}] the standby's lag 0", standby_current, 600)
    else:
        before = proc.wait_for(lambda s: _batches(s) >= 1, 60)
    time.sleep(args.settle_s)
    return load_s, proc.status() or before


def moved_and_ran(status: dict[str, Any], victim_executor: str, since: float) -> bool:
    """The task runs on another executor than ``victim_executor``, restored its store there,
    and a micro-batch finished after ``since``."""
    executor = active_executor(status)
    finished = (status.get("last_batch") or {}).get("finished_at") or 0
    task = (status.get("tasks") or {}).get(TASK) or {}
    return (
        executor not in (None, victim_executor)
        and task.get("executor") == executor
        and finished > since
        and bool(store_restore(status))
    )


def failover(
    work: Path, cluster: LocalSparkCluster, bootstrap: str, standbys: int, args: Any
) -> dict[str, Any]:
    """One failover case of the "worker killed" scenario (see the module docstring)."""
    name = f"standby{standbys}"
    proc, trickle = start_case(work, cluster, bootstrap, name, standbys, args)
    try:
        load_s, before = ready_for_fault(proc, trickle, name, standbys, args)
        victim_executor = active_executor(before)
        if victim_executor is None:
            raise RuntimeError(f"[{name}] no executor runs {TASK}: {before.get('placement')}")
        victim = worker_running_task(cluster, before)
        lag_at_kill = standby_lag(before)
        log(f"[{name}] kill -9 worker {victim} (executor {victim_executor} runs {TASK})")
        killed_at = time.time()
        cluster.kill_worker(victim)
        after = wait_for(
            proc,
            f"[{name}] the task moved and a batch finished",
            lambda s: moved_and_ran(s, victim_executor, killed_at),
            600,
        )
        restore = store_restore(after)
        placement = after.get("placement") or {}
        result = {
            "load_seconds": round(load_s, 1),
            "killed_worker": victim,
            "from_executor": victim_executor,
            "to_executor": active_executor(after),
            "standby_lag_at_kill": lag_at_kill,
            "restore_seconds": restore.get("seconds"),
            "restore_records": restore.get("records"),
            "restore_source": restore.get("source"),
            "restore_reason": restore.get("reason"),
            "end_to_end_seconds": round(after["last_batch"]["finished_at"] - killed_at, 2),
            "first_batch_after_kill": after.get("last_batch"),
            # The task's own phases on the survivor (open includes the restore).
            "task_seconds_after_kill": ((after.get("tasks") or {}).get(TASK) or {}).get("seconds"),
            "restores": placement.get("restores"),
            "moves_by_reason": placement.get("moves_by_reason"),
            "trickle_rps": args.trickle_rps,
        }
        log(f"[{name}] {json.dumps({k: result[k] for k in list(result)[:10]})}")
        return result
    finally:
        trickle.stop_event.set()
        proc.kill9()
        for worker in cluster.workers:
            if worker.index not in cluster.alive_worker_indexes() and not worker.alive():
                log(f"restarting worker {worker.index}")
                cluster.restart_worker(worker.index)


def host_frozen(
    work: Path,
    cluster: LocalSparkCluster,
    bootstrap: str,
    standbys: int,
    args: Any,
    spark_conf: dict[str, str] | None,
) -> dict[str, Any]:
    """One case of the "host frozen" scenario: as :func:`failover`, but the worker running
    the task is frozen (SIGSTOP of all its processes) instead of killed; from the freeze to
    the first batch on the survivor, then the thaw and what the app does after it."""
    name = f"frozen-standby{standbys}"
    # Counted updates: the zombie, once thawed, has a store and a changelog tail to get wrong.
    proc, trickle = start_case(work, cluster, bootstrap, name, standbys, args, spark_conf, b"")
    victim: int | None = None
    result: dict[str, Any] = {}
    try:
        load_s, before = ready_for_fault(proc, trickle, name, standbys, args)
        victim_executor = active_executor(before)
        if victim_executor is None:
            raise RuntimeError(f"[{name}] no executor runs {TASK}: {before.get('placement')}")
        victim = worker_running_task(cluster, before)
        watch = LostExecutorWatch(proc.log_path, victim_executor)
        result.update(
            load_seconds=round(load_s, 1),
            frozen_worker=victim,
            from_executor=victim_executor,
            standby_lag_at_freeze=standby_lag(before),
            fencing_before_freeze=_fencing(before),
            load_average_at_freeze=round(os.getloadavg()[0], 2),
            trickle_updates_counted=trickle.value is not None,
            # The library this case's app ran (others may commit while a bench runs).
            code=code_version(),
        )
        task_pid = (before.get("tasks") or {}).get(TASK, {}).get("worker_pid")
        if args.freeze_when == "busy" and task_pid:
            # Mid-batch, as the cluster tests freeze: the thawed Python worker then resumes
            # in the middle of the batch it ran, with its stale view of the task.
            result["task_worker_cpu_before_freeze_s"] = wait_busy(int(task_pid))
        result["froze_mid_batch"] = result.get("task_worker_cpu_before_freeze_s") is not None
        log(f"[{name}] SIGSTOP worker {victim}'s host (executor {victim_executor} runs {TASK})")
        frozen_at = time.time()
        try:
            result["frozen_pids"] = len(cluster.freeze_worker(victim))
            result.update(_follow_freeze(proc, watch, victim_executor, frozen_at, name, args))
        except Exception as exc:  # recorded: what the app did after the thaw still counts
            result["error"] = f"{type(exc).__name__}: {exc}"
            log(f"[{name}] ERROR while frozen: {result['error']}")
        thawed_at = time.time()
        # Its CPU time as the freeze left it, read before it can run again.
        zombie = ZombieWatch(int(task_pid) if task_pid else None, thawed_at)
        cluster.thaw_worker(victim)
        result["frozen_seconds"] = round(thawed_at - frozen_at, 2)
        log(f"[{name}] thawed worker {victim} after {result['frozen_seconds']} s")
        worker = cluster.workers[victim]
        result["executor_command_network_conf"] = executor_network_conf(worker.work_dir)
        result["after_thaw"] = _after_thaw(
            cluster, proc, trickle, bootstrap, victim, thawed_at, zombie, name, args
        )
        shown = {k: v for k, v in result.items() if not isinstance(v, dict)}
        log(f"[{name}] {json.dumps(shown)}")
        return result
    finally:
        # Never leave stopped processes behind, whatever failed above.
        for index in cluster.frozen_workers():
            log(f"thawing worker {index}")
            cluster.thaw_worker(index)
        trickle.stop_event.set()
        proc.kill9()
        if victim is not None:
            _worker_back_or_restart(cluster, victim, args.recover_timeout_s)


def _fencing(status: dict[str, Any]) -> dict[str, Any] | None:
    """The status document's fencing counts (docs/fencing.md), when it has them."""
    fencing = status.get("fencing")
    if not isinstance(fencing, dict):
        return None
    return {
        k: fencing.get(k) for k in ("fenced_total", "by_kind", "by_task", "stale_results_dropped")
    }


def _follow_freeze(
    proc: AppProcess,
    watch: LostExecutorWatch,
    victim_executor: str,
    frozen_at: float,
    name: str,
    args: Any,
) -> dict[str, Any]:
    """Poll the status document and the app's log (bounded by ``--frozen-timeout-s``) until
    the first batch finished with the task on another executor; seconds from the freeze to
    each step."""
    log(f"[{name}] waiting for the task to move and a batch to finish")
    moved_at = None
    deadline = time.monotonic() + args.frozen_timeout_s
    while True:
        watch.poll()
        status = proc.status() or {}
        if moved_at is None and active_executor(status) not in (None, victim_executor):
            moved_at = time.time()
        if moved_and_ran(status, victim_executor, frozen_at):
            break
        if proc.proc is not None and proc.proc.poll() is not None:
            raise RuntimeError(f"app exited with {proc.proc.returncode}; see {proc.log_path}")
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"no batch on another executor within {args.frozen_timeout_s:.0f} s of the "
                f"freeze; see {proc.log_path}"
            )
        time.sleep(0.1)
    watch.poll()
    restore = store_restore(status)
    placement = status.get("placement") or {}

    def since(t: float | None) -> float | None:
        return round(t - frozen_at, 2) if t is not None else None

    return {
        "to_executor": active_executor(status),
        "restore_seconds": restore.get("seconds"),
        "restore_records": restore.get("records"),
        "restore_source": restore.get("source"),
        "restore_reason": restore.get("reason"),
        # The driver's log first said the executor was lost (heartbeat timeout or master).
        "executor_lost_seconds": since(watch.first_seen),
        "executor_lost_lines": watch.lines,
        # The status document first placed the task on another executor.
        "moved_seconds": since(moved_at),
        "end_to_end_seconds": round(status["last_batch"]["finished_at"] - frozen_at, 2),
        "first_batch_after_freeze": status.get("last_batch"),
        "task_seconds_after_freeze": ((status.get("tasks") or {}).get(TASK) or {}).get("seconds"),
        "restores": placement.get("restores"),
        "moves_by_reason": placement.get("moves_by_reason"),
        "trickle_rps": args.trickle_rps,
    }


def _after_thaw(
    cluster: LocalSparkCluster,
    proc: AppProcess,
    trickle: Trickle,
    bootstrap: str,
    victim: int,
    thawed_at: float,
    zombie: ZombieWatch,
    name: str,
    args: Any,
) -> dict[str, Any]:
    """After the thaw (each wait bounded by ``--recover-timeout-s``): the worker back at the
    master, the app back on two executors and still running batches; then the trickle
    stopped, the input drained, the status' fencing counts and the store checked."""
    log(f"[{name}] after the thaw: waiting for the worker, two executors and a batch")
    out: dict[str, Any] = {}
    firsts: dict[str, float] = {}
    deadline = time.monotonic() + args.recover_timeout_s
    next_master_look = 0.0
    while time.monotonic() < deadline and len(firsts) < 3:
        zombie.poll()
        now = time.time()
        if "worker_alive_at_master" not in firsts and time.monotonic() >= next_master_look:
            next_master_look = time.monotonic() + 0.5  # an HTTP call to the master
            if victim in cluster.alive_worker_indexes():
                firsts["worker_alive_at_master"] = now
        status = proc.status() or {}
        if "two_executors" not in firsts and len(_executors(status)) >= 2:
            firsts["two_executors"] = now
        finished = (status.get("last_batch") or {}).get("finished_at") or 0
        if "batch_finished" not in firsts and finished > thawed_at:
            firsts["batch_finished"] = now
        if proc.proc is not None and proc.proc.poll() is not None:
            out["app_exited_with"] = proc.proc.returncode
            break
        time.sleep(0.2)
    zombie.poll()
    # The task's Python worker of the frozen host, from the thaw on.
    out["task_worker"] = zombie.report()
    for what in ("worker_alive_at_master", "two_executors", "batch_finished"):
        t = firsts.get(what)
        out[f"{what}_seconds"] = round(t - thawed_at, 2) if t is not None else None
    trickle_alive = trickle.is_alive()
    trickle.stop_event.set()
    trickle.join(30)
    out["trickle_updates"] = trickle.produced
    out["trickle_ran_to_the_end"] = trickle_alive and not trickle.is_alive()
    if "app_exited_with" in out:
        return out
    try:
        ends = log_end_offsets(
            consumer_config(bootstrap, group_id="failover-bench-drain"), [(trickle.topic, 0)]
        )
        end = ends[(trickle.topic, 0)]
        status = wait_for(
            proc,
            f"[{name}] the input drained to offset {end:,}",
            lambda s: any(p["position"] >= end for p in s.get("source_partitions") or []),
            args.recover_timeout_s,
        )
        out["drained_seconds"] = round(time.time() - thawed_at, 2)
    except Exception as exc:  # recorded, not fatal: the JSON says what did not recover
        out["drain_error"] = f"{type(exc).__name__}: {exc}"
        status = proc.status() or {}
    out["state"] = status.get("state")
    out["executors"] = _executors(status)
    out["active_executor"] = active_executor(status)
    out["batches"] = _batches(status)
    out["last_batch"] = status.get("last_batch")
    out["fencing"] = _fencing(status)
    if "drain_error" not in out and out["trickle_ran_to_the_end"]:
        log(f"[{name}] checking the store against the input")
        out["store_check"] = verify_counts(
            proc.spec,
            proc.overrides,
            proc.log_path.parent / "rebuilt-state",
            STORE,
            expected_counts(args.keys, trickle.produced if trickle.value is not None else 0),
            key_of,
        )
        log(f"[{name}] store check: {json.dumps(out['store_check'])}")
    return out


def _worker_back_or_restart(cluster: LocalSparkCluster, index: int, timeout_s: float) -> None:
    """Wait (bounded) until the thawed worker is ALIVE at the master again; otherwise kill
    and restart it, so the next case starts on two workers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if index in cluster.alive_worker_indexes():
            return
        time.sleep(0.5)
    log(f"worker {index} not ALIVE at the master {timeout_s:.0f} s after the thaw: restarting")
    cluster.kill_worker(index)
    cluster.restart_worker(index)


def _executors(status: dict[str, Any]) -> list[str]:
    return list((status.get("placement") or {}).get("executors") or [])


def _batches(status: dict[str, Any]) -> int:
    return int((status.get("throughput") or {}).get("batches", 0))


def _processed(status: dict[str, Any]) -> int:
    return int((status.get("totals") or {}).get("records_processed", 0))


class RawGets:
    """Point gets over one kept-alive connection with a plain socket: the load generator's
    clients stand for other machines, and on this one their CPU competes with the app, so
    they spend as little as they can (0.075 ms of CPU per get against 0.20 ms for
    :class:`QueryClient` on ``http.client``, one thread's CPU on loopback). Answers as
    ``QueryClient.get_answer`` (status, JSON body); expects a ``Content-Length`` (the query
    server always sends one)."""

    def __init__(self, url: str, store: str, timeout_s: float = 5.0) -> None:
        split = urlsplit(url)
        self.url = url
        self.address = (split.hostname or "127.0.0.1", split.port or 80)
        self.timeout_s = timeout_s
        self.prefix = f"GET /stores/{quote(store, safe='')}/get?key="
        self.sock: socket.socket | None = None
        self.buffer = b""

    def get_answer(self, key: str) -> QueryAnswer:
        request = f"{self.prefix}{quote(key, safe='')} HTTP/1.1\r\nHost: q\r\n\r\n".encode()
        for attempt in (1, 2):
            try:
                if self.sock is None:
                    self.sock = socket.create_connection(self.address, self.timeout_s)
                    self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    self.buffer = b""
                self.sock.sendall(request)
                status, body = self._response()
                return QueryAnswer(status, json.loads(body) if body else {}, self.url)
            except (OSError, ValueError):
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _response(self) -> tuple[int, bytes]:
        assert self.sock is not None
        while (end := self.buffer.find(b"\r\n\r\n")) < 0:
            self.buffer += self._recv()
        head, rest = self.buffer[:end], self.buffer[end + 4 :]
        status = int(head[9:12])
        marker = head.lower().find(b"content-length:")
        if marker < 0:
            raise ValueError("an answer without Content-Length")
        length = int(head[marker + 15 :].split(b"\r\n", 1)[0])
        while len(rest) < length:
            rest += self._recv()
        self.buffer = rest[length:]
        return status, rest[:length]

    def _recv(self) -> bytes:
        assert self.sock is not None
        data = self.sock.recv(65536)
        if not data:
            raise ConnectionError("the query server closed the connection")
        return data

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None


class QueryLoad:
    """``threads`` clients sharing a ``rps`` cap, point gets of existing keys, for a while.
    ``client``: ``raw`` (:class:`RawGets`) or ``library`` (:class:`QueryClient`)."""

    def __init__(self, url: str, keys: int, threads: int, client: str = "raw") -> None:
        self.url, self.client_kind = url, client
        self.client = QueryClient(url, timeout_s=5.0)
        self.keys, self.threads = keys, threads
        self._lock = threading.Lock()
        self.missing: list[dict[str, Any]] = []  # the first answers "not found" (a defect)
        self.errors: list[dict[str, Any]] = []  # the first answers other than 200

    def run_for(self, seconds: float, rps: float) -> dict[str, Any]:
        """Gets for ``seconds`` at up to ``rps``; latencies (s) of the 200s and counts."""
        latencies: list[float] = []
        statuses: dict[int, int] = {}
        not_found = 0
        stop_at = time.monotonic() + seconds
        interval = self.threads / rps  # each thread's share of the cap

        def client(seed: int) -> None:
            nonlocal not_found
            rng = random.Random(seed)
            raw = RawGets(self.url, STORE) if self.client_kind == "raw" else None
            next_at = time.monotonic()
            while True:
                now = time.monotonic()
                if now >= stop_at:
                    break
                if now < next_at:
                    time.sleep(next_at - now)
                next_at = max(next_at + interval, now - 1.0)  # no burst after a stall
                t0 = time.perf_counter()
                key = key_of(rng.randrange(self.keys))
                answer = raw.get_answer(key) if raw else self.client.get_answer(STORE, key)
                elapsed = time.perf_counter() - t0
                with self._lock:
                    statuses[answer.status] = statuses.get(answer.status, 0) + 1
                    if answer.status == 200:
                        latencies.append(elapsed)
                        if not answer.body.get("found"):  # every key asked for exists
                            not_found += 1
                            if len(self.missing) < 5:
                                self.missing.append({"at": time.time(), **answer.body})
                    elif len(self.errors) < 5:
                        self.errors.append({"status": answer.status, **answer.body})
            if raw:
                raw.close()
            self.client.close()

        started, cpu0 = time.monotonic(), time.process_time()
        workers = [threading.Thread(target=client, args=(n,)) for n in range(self.threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        wall = time.monotonic() - started
        return {
            "seconds": round(wall, 2),
            "client_cpu_seconds": round(time.process_time() - cpu0, 2),
            "latencies": latencies,
            "statuses": {str(k): v for k, v in sorted(statuses.items())},
            "not_found": not_found,
            "rps": round(len(latencies) / wall, 1),
        }


def percentiles_ms(latencies: list[float]) -> dict[str, float | None]:
    lat = sorted(latencies)
    if not lat:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None}
    return {
        "p50_ms": round(lat[len(lat) // 2] * 1e3, 2),
        "p99_ms": round(lat[int(0.99 * (len(lat) - 1))] * 1e3, 2),
        "max_ms": round(lat[-1] * 1e3, 2),
    }


def queries(
    work: Path, cluster: LocalSparkCluster, bootstrap: str, args: Any, services: str
) -> dict[str, Any]:
    """The query phase (see the module docstring); ``services``: where the executor's query
    server runs, ``in_worker`` (a Python worker that runs tasks too) or ``process`` (a
    process of its own: ``executor_services_process``)."""
    topic = f"keys-queries-{services}"
    ensure_topic(make_admin(bootstrap), topic, 1, {})
    log(f"[queries] producing {args.query_keys:,} keys")
    produce_keys(bootstrap, topic, range(args.query_keys))
    proc = start_app(
        work,
        cluster,
        bootstrap,
        f"queries-{services}",
        topic,
        query_port=0,
        max_records_per_batch=args.backlog_batch_records,
        executor_services_process=services == "process",
    )
    try:
        status = wait_for(proc, "[queries] the keys processed", drained, 900)
        executor = active_executor(status)
        report = ((status.get("placement") or {}).get("executor_reports") or {}).get(executor) or {}
        query = report.get("query") or {}
        if not query.get("port"):
            raise RuntimeError(f"[queries] executor {executor} reports no query server: {report}")
        url = f"http://{query['host']}:{query['port']}"
        load = QueryLoad(url, args.query_keys, args.query_threads, args.query_client)
        probe = load.client.get_answer(STORE, key_of(0))
        if probe.status != 200 or not probe.body.get("found"):
            raise RuntimeError(f"[queries] a get of an existing key answered {probe}")
        task = (status.get("tasks") or {}).get(TASK) or {}
        same_process = report.get("pid") == task.get("worker_pid")
        rng = random.Random(11)
        log(f"[queries] producing a backlog of {args.backlog:,} updates")
        updates = [rng.randrange(args.query_keys) for _ in range(args.backlog)]
        produce_keys(bootstrap, topic, updates)
        # The first backlog batches pay for reading ahead: one unmeasured window first.
        time.sleep(args.window_s)
        rates = [float(r) for r in str(args.query_rps).split(",")]
        windows: list[dict[str, Any]] = []

        def measure(
            rate: float, with_queries: bool, label: str, burn: float = 0.0
        ) -> dict[str, Any]:
            start = proc.status() or {}
            cpu0, t0 = cpu_snapshot(), time.monotonic()
            with CpuBurner(burn):
                answer = load.run_for(args.window_s, rate) if with_queries else None
                if answer is None:
                    time.sleep(args.window_s)
                cores = cores_by_role(cpu0, cpu_snapshot(), time.monotonic() - t0)
            end = proc.status() or {}
            span = (end.get("updated_at") or 0) - (start.get("updated_at") or 0)
            records = _processed(end) - _processed(start)
            window = {
                "rps_cap": rate,
                "queries": with_queries,
                "seconds": round(time.monotonic() - t0, 2),
                "status_span_seconds": round(span, 2),
                "records": records,
                "processing_rps": round(records / span, 1) if span > 0 else None,
                "drained": drained(end),
                "burn_cores": burn,
                # Where the window's CPU went: the app's Python workers, the broker, the
                # service process, this script's query clients (driver_python), the JVMs.
                "cores_by_role": cores,
                "query_load": answer,
            }
            shown = {k: v for k, v in window.items() if k != "query_load"}
            if answer:
                shown.update(get_rps=answer["rps"], **percentiles_ms(answer["latencies"]))
            log(f"[queries] {label}: {json.dumps(shown)}")
            return window

        for rate in rates:
            for pair in range(args.pairs):
                # ABBA order, so a drift in the machine's speed does not favour one side.
                order = (False, True) if pair % 2 == 0 else (True, False)
                for with_queries in order:
                    windows.append(measure(rate, with_queries, f"window {len(windows) + 1}"))
        # The same pairs with no reads in either window: how far apart two adjacent windows
        # land on this machine when nothing differs (the floor under any pair's ratio).
        control = [
            measure(0.0, False, f"control window {n + 1}") for n in range(2 * args.control_pairs)
        ]
        # Pairs with no reads, one window of each with a plain busy loop using
        # ``--burn-cores`` instead (what the reads' CPU alone costs the app on these cores).
        burned = [
            measure(0.0, False, f"burn window {n + 1}", args.burn_cores if n % 4 in (1, 2) else 0.0)
            for n in range(2 * args.burn_pairs)
        ]
        if any(w["drained"] for w in windows + control + burned):
            log("[queries] WARNING: the backlog drained inside a window; raise --backlog")
        by_rate = [summarize_rate(rate, windows) for rate in rates]
        for window in windows:  # keep the JSON small: per-window figures only
            if window["query_load"]:
                lat = window["query_load"].pop("latencies")
                window["query_load"].update(percentiles_ms(lat))
        final = proc.status() or {}
        reports = (final.get("placement") or {}).get("executor_reports") or {}
        return {
            "services": services,
            "query_executor": executor,
            "query_server_in_task_process": same_process,
            "query_server_report": (reports.get(executor) or {}).get("query"),
            "query_not_found_answers": load.missing,
            "query_error_answers": load.errors,
            "by_rate": by_rate,
            "windows": windows,
            # Neither window has reads: pair_ratios gives each pair's later ÷ earlier rate.
            "control_pair_ratios": pair_ratios(control),
            "control_block_ratios": block_ratios(control),
            "control_windows": control,
            # The busy loop's windows in the middle of each block: with it ÷ without.
            "burn_block_ratios": block_ratios(burned),
            "burn_windows": burned,
        }
    finally:
        proc.kill9()


class CpuBurner:
    """A child process that keeps ``cores`` (< 1) of a core busy with a plain loop while the
    block runs: ~10 ms periods, busy for their ``cores`` share (0: nothing starts)."""

    def __init__(self, cores: float) -> None:
        self.cores = cores
        self._stop: Any = None
        self._child: Any = None

    def __enter__(self) -> CpuBurner:
        if self.cores > 0:
            import multiprocessing

            ctx = multiprocessing.get_context("spawn")
            self._stop = ctx.Event()
            self._child = ctx.Process(target=_burn, args=(self.cores, self._stop), daemon=True)
            self._child.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._child is not None:
            self._stop.set()
            self._child.join(10)


def burn_cores(text: str) -> float:
    """``--burn-cores``: a share of one core, at least 0 and below 1."""
    cores = float(text)
    if not 0 <= cores < 1:
        raise argparse.ArgumentTypeError(f"must be at least 0 and below 1, not {cores}")
    return cores


def _burn(cores: float, stop: Any) -> None:
    period = 0.01
    while not stop.is_set():
        started = time.perf_counter()
        while time.perf_counter() - started < period * cores:
            pass
        time.sleep(period * (1 - cores))


def pair_ratios(windows: list[dict[str, Any]]) -> list[float | None]:
    """with ÷ without processing rate of each off/on pair (windows in run order)."""
    ratios: list[float | None] = []
    for a, b in zip(windows[::2], windows[1::2], strict=False):
        on, off = (a, b) if a["queries"] else (b, a)
        usable = not (a["drained"] or b["drained"]) and off["processing_rps"]
        ratios.append(round(on["processing_rps"] / off["processing_rps"], 3) if usable else None)
    return ratios


def records_per_second(windows: list[dict[str, Any]]) -> float | None:
    """The windows' processing rate taken together (their records over their status spans)."""
    span = sum(w["status_span_seconds"] for w in windows)
    return sum(w["records"] for w in windows) / span if span > 0 else None


def block_ratios(windows: list[dict[str, Any]]) -> list[float | None]:
    """Each ABBA block's middle two windows' processing rate ÷ its outer two's (windows in
    run order, four a block): a drift in the machine's speed that is linear over the block
    weighs on both sides alike. With the query windows in the middle it is with ÷ without."""
    ratios: list[float | None] = []
    for n in range(0, len(windows) - 3, 4):
        block = windows[n : n + 4]
        inner, outer = records_per_second(block[1:3]), records_per_second([block[0], block[3]])
        usable = not any(w["drained"] for w in block) and inner and outer
        ratios.append(round(inner / outer, 3) if usable else None)  # type: ignore[operator]
    return ratios


def summarize_rate(rate: float, windows: list[dict[str, Any]]) -> dict[str, Any]:
    """One rate cap's windows: the read load's figures and processing with and without it."""
    mine = [w for w in windows if w["rps_cap"] == rate]

    def processing(flag: bool) -> float | None:
        # A window in which the backlog ran out measured the input, not the app.
        rate = records_per_second([w for w in mine if w["queries"] == flag and not w["drained"]])
        return round(rate, 1) if rate is not None else None

    loads = [w["query_load"] for w in mine if w["query_load"]]
    seconds = sum(q["seconds"] for q in loads)
    latencies = [x for q in loads for x in q["latencies"]]
    statuses: dict[str, int] = {}
    for q in loads:
        for code, n in q["statuses"].items():
            statuses[code] = statuses.get(code, 0) + n
    with_q, without_q = processing(True), processing(False)
    pct = percentiles_ms(latencies)
    off = [w["processing_rps"] for w in mine if not w["queries"] and not w["drained"]]
    on = [w["processing_rps"] for w in mine if w["queries"] and not w["drained"]]
    return {
        "query_rps_cap": rate,
        "query_get_rps": round(len(latencies) / seconds, 1) if seconds else None,
        "query_get_p50_ms": pct["p50_ms"],
        "query_get_p99_ms": pct["p99_ms"],
        "query_get_max_ms": pct["max_ms"],
        "query_statuses": statuses,
        "query_not_found": sum(q["not_found"] for q in loads),
        "client_cpu_pct": (
            round(100 * sum(q["client_cpu_seconds"] for q in loads) / seconds, 1)
            if seconds
            else None
        ),
        "processing_rps_with_queries": with_q,
        "processing_rps_without": without_q,
        "processing_ratio_with_to_without": (
            round(with_q / without_q, 3) if with_q and without_q else None
        ),
        # Each ABBA pair's own ratio (adjacent windows): less exposed to the drift.
        "pair_ratios": pair_ratios(mine),
        # Each ABBA block's (off on on off): a linear drift cancels.
        "block_ratios": block_ratios(mine),
        # The spread of single windows: how much of the ratio is this machine's noise.
        "processing_rps_without_windows": off,
        "processing_rps_with_queries_windows": on,
    }


def code_version() -> dict[str, Any]:
    """The checkout measured: its commit and the library files changed since (others may be
    editing the working tree while a bench runs)."""
    import subprocess

    root = Path(__file__).resolve().parents[1]

    def git(*argv: str) -> str:
        try:
            done = subprocess.run(
                ["git", *argv], cwd=root, capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return ""
        return done.stdout.rstrip("\n") if done.returncode == 0 else ""

    changed = [
        c[3:] for c in git("status", "--porcelain", "--", "include", "spark_apps").splitlines()
    ]
    return {"commit": git("rev-parse", "HEAD") or None, "uncommitted": [c for c in changed if c]}


SCENARIOS = ("killed", "frozen", "queries")
SCENARIO_ALIASES = {
    "kill": "killed",
    "worker_killed": "killed",
    "failover": "killed",
    "freeze": "frozen",
    "host_frozen": "frozen",
    "query": "queries",
}


def selected_scenarios(spec: str, skip: list[str]) -> list[str]:
    """The scenarios to run, in their fixed order, from ``--scenarios`` and ``--skip``."""
    chosen = set()
    for name in (n.strip().lower() for n in spec.split(",") if n.strip()):
        name = SCENARIO_ALIASES.get(name, name)
        if name not in SCENARIOS:
            raise SystemExit(f"unknown scenario {name!r}: pick from {', '.join(SCENARIOS)}")
        chosen.add(name)
    if "failover" in skip:
        chosen -= {"killed", "frozen"}
    if "queries" in skip:
        chosen.discard("queries")
    return [s for s in SCENARIOS if s in chosen]


def frozen_scenario(
    work: Path, cluster: LocalSparkCluster, bootstrap: str, config: ClusterConfig, args: Any
) -> dict[str, Any]:
    """The "host frozen" scenario: both cases and the timeouts they ran under."""
    spark_conf: dict[str, str] | None = None
    if args.failover_conf == "explicit":
        from statekeeper.spark.session_env import CLUSTER_FAILOVER_CONF

        spark_conf = dict(CLUSTER_FAILOVER_CONF)
    with_s = host_frozen(work, cluster, bootstrap, 1, args, spark_conf)
    without = host_frozen(work, cluster, bootstrap, 0, args, spark_conf)
    return {
        "with_standby": with_s,
        "without_standby": without,
        "failover_conf": args.failover_conf,
        "freeze_when": args.freeze_when,
        # What the bench put in the app's spec; the app adds its own defaults to it.
        "spark_conf_in_spec": spark_conf or {},
        "cluster_worker_timeout_s": config.worker_timeout_s,
        "frozen_timeout_s": args.frozen_timeout_s,
        "recover_timeout_s": args.recover_timeout_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--batch-records", type=int, default=250_000)
    parser.add_argument("--trickle-rps", type=int, default=2_000)
    parser.add_argument("--settle-s", type=float, default=2.0)
    parser.add_argument("--query-keys", type=int, default=1_000_000)
    parser.add_argument("--backlog", type=int, default=12_000_000)
    parser.add_argument("--backlog-batch-records", type=int, default=50_000)
    parser.add_argument("--pairs", type=int, default=4, help="off/on window pairs per rate")
    parser.add_argument(
        "--control-pairs",
        type=int,
        default=2,
        help="window pairs with no reads in either, after the others (the noise floor)",
    )
    parser.add_argument(
        "--burn-pairs",
        type=int,
        default=0,
        help="window pairs with no reads, one of each with a busy loop of --burn-cores "
        "(the reads' CPU alone, as a cost to the app)",
    )
    parser.add_argument("--burn-cores", type=burn_cores, default=0.4)
    parser.add_argument(
        "--query-client",
        choices=("raw", "library"),
        default="raw",
        help="the read load's HTTP client: a plain socket (raw, the lightest) or "
        "statekeeper's QueryClient (library, on http.client)",
    )
    parser.add_argument("--window-s", type=float, default=8.0)
    parser.add_argument("--query-threads", type=int, default=2)
    parser.add_argument(
        "--query-rps", default="100,500", help="rate caps (total gets/s), comma-separated"
    )
    parser.add_argument(
        "--query-services",
        default="in_worker,process",
        help="where the query server runs, comma-separated, each measured in turn: in_worker "
        "(a Python worker running tasks), process (executor_services_process)",
    )
    parser.add_argument(
        "--scenarios",
        default=os.environ.get("STATEKEEPER_BENCH_SCENARIOS", ",".join(SCENARIOS)),
        help="what runs, comma-separated: killed, frozen, queries "
        "(env STATEKEEPER_BENCH_SCENARIOS; default all)",
    )
    parser.add_argument(
        "--skip",
        choices=["failover", "queries"],
        action="append",
        default=[],
        help="failover: neither killed nor frozen",
    )
    parser.add_argument(
        "--failover-conf",
        choices=["app", "explicit"],
        default="app",
        help="frozen: the app's own Spark confs, or CLUSTER_FAILOVER_CONF put in its spec",
    )
    parser.add_argument(
        "--freeze-when",
        choices=["busy", "any"],
        default="busy",
        help="frozen: once the task's Python worker is mid-batch (at most 20 s), or at once",
    )
    parser.add_argument(
        "--frozen-timeout-s",
        type=float,
        default=600.0,
        help="frozen: longest wait for the first batch on the survivor",
    )
    parser.add_argument(
        "--recover-timeout-s",
        type=float,
        default=240.0,
        help="frozen: longest wait for each step after the thaw",
    )
    parser.add_argument("--output", help="also write the JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args()
    scenarios = selected_scenarios(args.scenarios, args.skip)
    # A SIGTERM unwinds like Ctrl-C, so frozen workers are thawed and everything is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    import pyspark

    result: dict[str, Any] = {
        "benchmark": "failover_and_queries",
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "pyspark": pyspark.__version__,
            "cluster": "local standalone: 2 workers x 1 core, 1g executors, one host",
            # Other work on the machine skews every figure: the 1-minute load, start and end.
            "load_average_start": round(os.getloadavg()[0], 2),
        },
        "keys": args.keys,
        "code": code_version(),
        "scenarios_run": scenarios,
        "scenarios": {},
    }
    # Spark binds to loopback and runs Python workers with this interpreter (as make does).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    work = Path(tempfile.mkdtemp(prefix="sk-failover-bench-"))
    log(f"work dir {work}")
    try:
        config = ClusterConfig(work / "cluster", workers=2, memory_per_worker="1g")
        with EmbeddedBroker() as broker, LocalSparkCluster(config) as cluster:
            bootstrap = broker.bootstrap_servers
            if "killed" in scenarios:
                with_s = failover(work, cluster, bootstrap, 1, args)
                without = failover(work, cluster, bootstrap, 0, args)
                result["failover"] = {"with_standby": with_s, "without_standby": without}
                result["scenarios"]["worker_killed"] = result["failover"]
                w, wo = with_s["restore_seconds"], without["restore_seconds"]
                ratio = round(wo / w, 1) if w and wo else None
                e2e = round(without["end_to_end_seconds"] / with_s["end_to_end_seconds"], 2)
                result.update(
                    with_standby_seconds=w,
                    without_standby_seconds=wo,
                    restore_speedup=ratio,
                    target_20x_met=bool(ratio and ratio >= RESTORE_TARGET),
                    with_standby_end_to_end_seconds=with_s["end_to_end_seconds"],
                    without_standby_end_to_end_seconds=without["end_to_end_seconds"],
                    end_to_end_speedup=e2e,
                    with_standby_records_replayed=with_s["restore_records"],
                    without_standby_records_replayed=without["restore_records"],
                )
            if "frozen" in scenarios:
                result["scenarios"]["host_frozen"] = frozen = frozen_scenario(
                    work, cluster, bootstrap, config, args
                )
                result.update(
                    frozen_with_standby_end_to_end_seconds=frozen["with_standby"].get(
                        "end_to_end_seconds"
                    ),
                    frozen_without_standby_end_to_end_seconds=frozen["without_standby"].get(
                        "end_to_end_seconds"
                    ),
                    frozen_store_correct_after_thaw=all(
                        ((frozen[c].get("after_thaw") or {}).get("store_check") or {}).get(
                            "correct"
                        )
                        for c in ("with_standby", "without_standby")
                    ),
                    frozen_fenced_total_after_thaw=[
                        ((frozen[c].get("after_thaw") or {}).get("fencing") or {}).get(
                            "fenced_total"
                        )
                        for c in ("with_standby", "without_standby")
                    ],
                )
            if "queries" in scenarios:
                modes = [m.strip() for m in args.query_services.split(",") if m.strip()]
                # Each mode's summary side by side; the headline figures are the last mode's.
                by_services = {m: queries(work, cluster, bootstrap, args, m) for m in modes}
                result["query_by_services"] = {
                    m: {
                        k: v
                        for k, v in q.items()
                        if k not in ("windows", "control_windows", "burn_windows")
                    }
                    for m, q in by_services.items()
                }
                q = by_services[modes[-1]]
                # The headline figures: the highest rate cap (the most reads).
                top = max(q["by_rate"], key=lambda r: r["query_rps_cap"])
                ratios = [r["processing_ratio_with_to_without"] for r in q["by_rate"]]
                result.update(
                    top,
                    # Met only if it holds at every rate cap measured.
                    reads_slow_processing_under_10pct=all(r and r >= 0.9 for r in ratios),
                    query_threads=args.query_threads,
                    query_window_seconds=args.window_s,
                    query_server_in_task_process=q["query_server_in_task_process"],
                    query_server_report=q["query_server_report"],
                    query_not_found_answers=q["query_not_found_answers"],
                    query_error_answers=q["query_error_answers"],
                    query_by_rate=q["by_rate"],
                    query_windows=q["windows"],
                    query_control_pair_ratios=q["control_pair_ratios"],
                    query_control_block_ratios=q["control_block_ratios"],
                    query_burn_block_ratios=q["burn_block_ratios"],
                    query_burn_windows=q["burn_windows"],
                    query_control_windows=q["control_windows"],
                )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    result["machine"]["load_average_end"] = round(os.getloadavg()[0], 2)
    text = json.dumps(result)
    print(text)
    if args.output:
        Path(args.output).write_text(text + "\n")


if __name__ == "__main__":
    main()
