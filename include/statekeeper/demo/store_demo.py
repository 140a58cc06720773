"""``make demo``: write, kill -9, restart, restore — and check the result against a recomputation.

Everything runs on embedded defaults: a Tansu broker on a free loopback port and a state
directory under ``var/demo``. The counting worker runs as a real subprocess so the kills
are real ``SIGKILL``s at chosen commit steps.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from rich.console import Console
from rich.table import Table

from statekeeper.demo.events import generate_events, recompute
from statekeeper.kafka.adapter import producer_config
from statekeeper.kafka.admin import ensure_topic, make_admin
from statekeeper.kafka.embedded import EmbeddedBroker

console = Console()


def _worker(bootstrap: str, topic: str, state: Path, batch: int, *extra: str) -> dict[str, Any]:
    summary = state.parent / "summary.json"
    summary.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "statekeeper.demo.counting_worker", "--bootstrap", bootstrap,
        "--topic", topic, "--state-dir", str(state), "--application-id", "demo",
        "--batch-size", str(batch), "--summary", str(summary), "--progress", *extra,
    ]  # fmt: skip
    started = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, timeout=600)
    elapsed = time.perf_counter() - started
    if proc.returncode == -9:
        return {"killed": True, "seconds": elapsed}
    if proc.returncode != 0:
        raise SystemExit(f"worker failed with exit code {proc.returncode}")
    result = json.loads(summary.read_text())
    result["seconds"] = elapsed
    return result


def _restore_table(title: str, summary: dict[str, Any]) -> Table:
    table = Table(title=title)
    for col in ("store", "restore", "from offset", "records", "records/s", "reason"):
        table.add_column(col)
    for r in summary["restores"]:
        table.add_row(
            r["store"],
            "full" if r["full"] else "partial",
            str(r["start_offset"]),
            f"{r['restored_records']:,}",
            f"{r['records_per_s']:,}",
            r["reason"] or "",
        )
    return table


def _check(summary: dict[str, Any], events: list) -> list[str]:
    expected = recompute(events)
    state = summary["state"]
    windows = {(k, s): n for k, s, n in state["window-counts"]}
    problems = []
    for name, got, want in (
        ("counts (RocksDB)", state["counts"], expected.counts),
        ("mem-counts (in-memory)", state["mem-counts"], expected.counts),
        ("recent-counts (LRU)", state["recent-counts"], expected.lru),
        ("window-counts (windows)", windows, expected.windows),
    ):
        if got != want:
            diff = len(set(got.items()) ^ set(want.items()))
            problems.append(f"{name}: {diff} entries differ from the recomputation")
        else:
            console.print(f"  [green]✓[/] {name}: {len(got):,} entries equal the recomputation")
    return problems


def run(args: argparse.Namespace) -> int:
    events_n, keys, batch = 100_000, 5_000, 5_000
    work = Path("var/demo").resolve()
    shutil.rmtree(work, ignore_errors=True)
    state = work / "state"
    console.rule("statekeeper store demo")
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        console.print(f"embedded broker on {bootstrap}; state in {state}")
        events = generate_events(events_n, keys, seed=42)
        topic = "demo-events"
        ensure_topic(make_admin(bootstrap), topic, 1, {})
        producer = Producer(producer_config(bootstrap))
        for ev in events:
            producer.produce(topic, ev.encode(), ev.key.encode(), 0)
        producer.flush(60)
        console.print(f"produced {events_n:,} events over {keys:,} keys ({batch:,} per batch)")

        steps = [
            ("changelog_produced:5", "after the changelog records of batch 5 were acked"),
            ("markers_written:9", "after the commit markers of batch 9"),
            ("mid_batch:12", "in the middle of batch 12"),
        ]
        for crash, when in steps:
            _worker(bootstrap, topic, state, batch, "--crash-at", crash)
            console.print(f"[red]kill -9[/] {when}")
        summary = _worker(bootstrap, topic, state, batch)
        console.print(_restore_table("restart with local state (partial restore)", summary))
        console.print(f"processed the remaining {summary['processed']:,} events")

        shutil.rmtree(state)
        console.print("[yellow]deleted the state directory[/]")
        summary = _worker(bootstrap, topic, state, batch)
        console.print(_restore_table("restart without local state (full restore)", summary))
        console.print(f"restore took {summary['restore_seconds']:.2f} s")

    console.rule("check against an independent recomputation of the input")
    problems = _check(summary, events)
    for problem in problems:
        console.print(f"  [red]✗[/] {problem}")
    if problems:
        return 1
    console.print("[bold green]restored state is exact: nothing lost, nothing applied twice[/]")
    return 0
