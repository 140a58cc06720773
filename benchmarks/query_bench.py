"""Interactive-query benchmark: point gets against one executor's query server.

One task's RocksDB store (``--keys`` str -> int entries) is written with the store classes;
a query server reads it through its secondary view while, in the second phase, another
process keeps committing ``--commit-keys`` keys every ``--commit-every-ms`` to the same
store (as an active task does). Measures, per phase and client-thread count:
  gets_per_s            point gets answered (HTTP keep-alive, one connection per thread)
  p50_ms / p99_ms       client-side latency of one get
  writer_commit_p50_ms  the writer's commit time (with the server reading alongside)
  batches_seen          distinct commits the answers showed (the view follows the writer)
and at a fixed rate (``--paced-rps`` gets/s from one client), without writes
(``paced_idle``) and while the writer commits (``paced_while_committing``):
  server_cpu_ms_per_get CPU the server's process spent per get (answers and following the
                        writer: catch-ups, reopens), from os.times() around the phase
  client_cpu_ms_per_get the client process's CPU per get
Clients run in another process. Prints one JSON object. To compare two checkouts, run it
with ``PYTHONPATH=<other checkout>/include`` in alternation.
Usage: python benchmarks/query_bench.py [--seconds S] [--paced-rps N]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from statekeeper.cluster.executor import ExecutorIdentity
from statekeeper.placement.assignment import Assignment, ExecutorEndpoint, TaskPlacement
from statekeeper.processing.topology import Subtopology, Topology
from statekeeper.query.client import QueryClient
from statekeeper.query.server import QueryServer
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.directory import TaskDirectory
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import Stores, build_store

APP = "query-bench"
SPEC = Stores.persistent("counts").with_serdes("str", "int")


def _key(i: int) -> str:
    return f"user-{i:07d}"


def _writer(path: str, keys: int, commit_keys: int, every_s: float, stop: Any, out: Any) -> None:
    store = build_store(SPEC, Path(path), None)
    rng = random.Random(2)
    batch = store.read_metadata().batch_id or 0
    took = []
    while not stop.is_set():
        batch += 1
        store.put_all([(_key(rng.randrange(keys)), batch) for _ in range(commit_keys)])
        started = time.perf_counter()
        store.commit(StoreMetadata(batch, batch, {}))
        took.append(time.perf_counter() - started)
        time.sleep(every_s)
    store.close()
    out.put({"batches": len(took), "commit_p50_ms": round(statistics.median(took) * 1e3, 3)})


def _load(client_threads: int, seconds: float, url: str, keys: int) -> dict[str, Any]:
    latencies: list[list[float]] = [[] for _ in range(client_threads)]
    batches: set[int] = set()
    errors: list[int] = []

    def run(n: int) -> None:
        client = QueryClient(url)
        rng = random.Random(n)
        mine = latencies[n]
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            started = time.perf_counter()
            answer = client.get_answer("counts", _key(rng.randrange(keys)))
            mine.append(time.perf_counter() - started)
            if answer.status != 200:
                errors.append(answer.status)
            else:
                batches.add(answer.body["batch_id"])
        client.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in range(client_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = sorted(x for xs in latencies for x in xs)
    return {
        "client_threads": client_threads,
        "gets_per_s": round(len(every) / seconds),
        "p50_ms": round(every[len(every) // 2] * 1e3, 3),
        "p99_ms": round(every[int(len(every) * 0.99)] * 1e3, 3),
        "errors": len(errors),
        "batches_seen": len(batches),
    }


def _paced(url: str, keys: int, rps: float, seconds: float, out: Any) -> None:
    """One client asking ``rps`` gets/s (the failover benchmark's load) for ``seconds``."""
    client = QueryClient(url)
    rng = random.Random(5)
    interval, latencies = 1.0 / rps, []
    next_at = time.monotonic()
    stop_at = next_at + seconds
    cpu0 = time.process_time()
    while time.monotonic() < stop_at:
        now = time.monotonic()
        if now < next_at:
            time.sleep(next_at - now)
        next_at += interval
        started = time.perf_counter()
        client.get_answer("counts", _key(rng.randrange(keys)))
        latencies.append(time.perf_counter() - started)
    client.close()
    latencies.sort()
    out.put(
        {
            "gets": len(latencies),
            "client_cpu_ms_per_get": round((time.process_time() - cpu0) * 1e3 / len(latencies), 3),
            "p50_ms": round(latencies[len(latencies) // 2] * 1e3, 3),
            "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1e3, 3),
        }
    )


def _paced_elsewhere(url: str, keys: int, rps: float, seconds: float) -> dict[str, Any]:
    """:func:`_paced` from another process, with this (the server's) process's CPU."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_paced, args=(url, keys, rps, seconds, out))
    times = os.times()
    cpu0 = times.user + times.system
    child.start()
    result = out.get(timeout=seconds + 60)
    times = os.times()
    child.join(timeout=30)
    cpu = times.user + times.system - cpu0
    return {
        "rps": rps,
        **result,
        "server_cpu_ms_per_get": round(cpu * 1e3 / result["gets"], 3),
    }


def _load_child(client_threads: int, seconds: float, url: str, keys: int, out: Any) -> None:
    out.put(_load(client_threads, seconds, url, keys))


def _load_elsewhere(client_threads: int, seconds: float, url: str, keys: int) -> dict[str, Any]:
    """:func:`_load` from another process: clients do not share the server's GIL (as
    across hosts), so the figures are the server's."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_load_child, args=(client_threads, seconds, url, keys, out))
    child.start()
    result = out.get(timeout=seconds + 60)
    child.join(timeout=30)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--commit-keys", type=int, default=1_000)
    parser.add_argument("--commit-every-ms", type=float, default=100.0)
    parser.add_argument("--paced-rps", type=float, default=500.0)
    args = parser.parse_args()
    result: dict[str, Any] = {
        "benchmark": "query",
        "python": platform.python_version(),
        "keys": args.keys,
    }
    with tempfile.TemporaryDirectory() as tmp:
        state_dir = Path(tmp)
        path = TaskDirectory(state_dir, APP, "0_0").store_path("counts")
        store = build_store(SPEC, path, None)
        store.put_all([(_key(i), 0) for i in range(args.keys)])
        store.commit(StoreMetadata(0, 0, {}))
        store.close()

        settings = StatekeeperSettings(state_dir=state_dir, application_id=APP, query_port=0)
        topology = Topology({}, {"counts": SPEC}, {}, [Subtopology(0, [], [], [], ["counts"])])
        server = QueryServer(settings, state_dir, ExecutorIdentity("1", "127.0.0.1", 0), topology)
        server.reconcile(
            Assignment(
                APP,
                1,
                {"0_0": TaskPlacement("1")},
                {"1": ExecutorEndpoint("1", "127.0.0.1", server.port)},
            )
        )
        try:
            started = time.perf_counter()
            QueryClient(server.url).get("counts", _key(0))
            result["first_get_ms"] = round((time.perf_counter() - started) * 1e3, 3)
            result["idle"] = [
                _load_elsewhere(n, args.seconds, server.url, args.keys) for n in (1, 4)
            ]
            result["paced_idle"] = _paced_elsewhere(
                server.url, args.keys, args.paced_rps, args.seconds
            )

            ctx = multiprocessing.get_context("spawn")
            stop, out = ctx.Event(), ctx.Queue()
            writer = ctx.Process(
                target=_writer,
                args=(
                    str(path),
                    args.keys,
                    args.commit_keys,
                    args.commit_every_ms / 1e3,
                    stop,
                    out,
                ),
            )
            writer.start()
            time.sleep(1.0)  # the writer's RocksDB open
            result["while_committing"] = [
                _load_elsewhere(n, args.seconds, server.url, args.keys) for n in (1, 4)
            ]
            result["paced_while_committing"] = _paced_elsewhere(
                server.url, args.keys, args.paced_rps, args.seconds
            )
            stop.set()
            result["writer"] = out.get(timeout=30)
            writer.join(timeout=30)
            copy = next(iter(server._copies.values()))
            result["view"] = {"catch_ups": copy.catch_ups, "reopens": copy.reopens}
        finally:
            server.close()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
