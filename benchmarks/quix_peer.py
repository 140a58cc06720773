"""The Quix Streams peer of the throughput benchmark: the same stateful count per key, on
the same broker and input topic, in Quix Streams' own venv (its pins differ from ours).

Two phases, each in a process of its own so each has its own peak RSS:

- ``process``: an Application counts every record of ``--topic`` per key in its RocksDB
  state (changelog on, Quix's defaults otherwise) and stops after ``--records`` outputs.
  Rates: from the run's start (session, rebalance, first fetch included) and steady (first
  record processed to the last).
- ``recover``: a second Application of the same consumer group with an empty state
  directory rebuilds the state from the changelog topics the first one wrote; the time
  of Quix's own recovery loop (``RecoveryManager.do_recovery``) and the changelog records
  it applied give the recovery rate.

Prints one JSON object. Run by ``throughput_bench.py --quix-python``; no statekeeper
imports, so it runs under any Python with ``quixstreams`` installed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def app_and_topic(app_cls: Any, args: argparse.Namespace) -> tuple[Any, Any]:
    """An Application of the bench's consumer group and state directory, and its input."""
    app = app_cls(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        state_dir=args.state_dir,
    )
    return app, app.topic(args.topic, key_deserializer="bytes", value_deserializer="bytes")


def process(app_cls: Any, args: argparse.Namespace) -> dict[str, Any]:
    app, topic = app_and_topic(app_cls, args)
    counts: dict[bytes, int] = {}
    first: list[float] = []

    def count(value: bytes, key: bytes, timestamp: int, headers: Any, state: Any) -> int:
        if not first:
            first.append(time.perf_counter())
        n = state.get("n", 0) + 1
        state.set("n", n)
        counts[key] = n
        return n

    sdf = app.dataframe(topic)
    sdf = sdf.apply(count, stateful=True, metadata=True)
    started = time.perf_counter()
    app.run(sdf, count=args.records, collect=False)
    ended = time.perf_counter()
    total = sum(counts.values())
    steady_s = ended - first[0] if first else 0.0
    return {
        "records": args.records,
        "state_total": total,
        "state_ok": total == args.records and len(counts) == args.keys,
        "from_start_rps": round(args.records / (ended - started)),
        "steady_rps": round(args.records / steady_s) if steady_s else None,
        "seconds": round(ended - started, 3),
        "peak_rss_mib": peak_rss_mib(),
    }


def recover(app_cls: Any, args: argparse.Namespace) -> dict[str, Any]:
    from quixstreams.state import recovery

    timed = {"seconds": 0.0, "records": 0}
    do_recovery = recovery.RecoveryManager.do_recovery
    apply_one = recovery.RecoveryPartition.recover_from_changelog_message

    def timed_recovery(self: Any) -> None:
        started = time.perf_counter()
        try:
            do_recovery(self)
        finally:
            timed["seconds"] += time.perf_counter() - started

    def counted(self: Any, *a: Any, **kw: Any) -> Any:
        timed["records"] += 1
        return apply_one(self, *a, **kw)

    recovery.RecoveryManager.do_recovery = timed_recovery  # type: ignore[method-assign]
    recovery.RecoveryPartition.recover_from_changelog_message = counted  # type: ignore[method-assign]
    app, topic = app_and_topic(app_cls, args)
    sdf = app.dataframe(topic).apply(lambda value, state: None, stateful=True)
    started = time.perf_counter()
    # Nothing new to process: it stops 2 s after recovery.
    app.run(sdf, timeout=2.0)
    seconds = timed["seconds"]
    return {
        "changelog_records": timed["records"],
        "recovery_seconds": round(seconds, 3),
        "recovery_rps": round(timed["records"] / seconds) if seconds else None,
        "wall_seconds": round(time.perf_counter() - started, 3),
        "peak_rss_mib": peak_rss_mib(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("phase", choices=["process", "recover"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--records", type=int, required=True)
    parser.add_argument("--keys", type=int, required=True)
    args = parser.parse_args()

    import quixstreams
    from quixstreams import Application

    run = process if args.phase == "process" else recover
    result = {"quixstreams": quixstreams.__version__, **run(Application, args)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
