"""``make demo``: patient_monitoring on Spark, end to end on embedded defaults.

Generate patient events → run the app → ``kill -9`` it mid-stream → delete one task's state
directory → restart → print the restores (partial vs full) and the alerts. Then recovering
state: a snapshot of the running app (``POST /snapshot``), more events (the tail), a lost task
directory restored from snapshot + tail, and a restore drill (RTO, RPO, report). Then a check
of every store and output against a Spark batch recomputation from the input topic. Last, the
snapshot, restore drill and changelog audit DAGs, each run once with ``dag.test()``.

    python -m spark_apps.patient_monitoring.demo [--patients 40 --minutes 30 --seed 7]
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from statekeeper.app.spec import load_app_spec
from statekeeper.generate.command import positive_float, positive_int
from statekeeper.kafka.embedded import EmbeddedBroker
from statekeeper.testing.app_process import AppProcess, spark_app_spec

console = Console(width=max(Console().width, 110))
PARTITIONS = 4
DROPPED_TASK = "0_1"
#: The generator's default start; the tail's events follow the first events in time.
TAIL_START_MS = 1_700_000_000_000


def _restore_table(status: dict[str, Any]) -> Table:
    table = Table(title="restart: how each task got its state back")
    for col in ("task", "store", "restore", "from offset", "records", "seconds", "reason"):
        table.add_column(col)
    for task_id, task in sorted(status["tasks"].items()):
        for r in task.get("restore") or []:
            table.add_row(
                task_id,
                r["store"],
                "[yellow]full[/]" if r["full"] else "partial",
                str(r["start_offset"]),
                f"{r['records']:,}",
                f"{r['seconds']:.3f}",
                r["reason"] or "",
            )
    return table


def _snapshot_table(request: dict[str, Any], manifests: dict[str, Any]) -> Table:
    """Per task: the processing pause (from the app's status) and the snapshot's keys and
    bytes (from the manifests in storage)."""
    table = Table(title=f"snapshot of the running app (request {request.get('request_id', '?')})")
    for col in ("task", "batch", "stores", "keys", "bytes", "pause ms"):
        table.add_column(col)
    tasks: dict[str, list[dict[str, Any]]] = {}
    for row in request.get("snapshots") or []:
        tasks.setdefault(row["task"], []).append(row)
    for task_id, rows in sorted(tasks.items()):
        found = [manifests[r["snapshot_id"]] for r in rows if r["snapshot_id"] in manifests]
        pause = rows[0].get("pause_ms")  # per task
        table.add_row(
            task_id,
            str(rows[0].get("batch_id")),
            str(len(rows)),
            f"{sum(m.key_count for m in found):,}",
            f"{sum(m.total_bytes for m in found):,}",
            "?" if pause is None else f"{pause:.1f}",
        )
    return table


def _recovered_table(reports: list[Any]) -> Table:
    table = Table(title=f"task {DROPPED_TASK} restored from snapshot + changelog tail")
    for col in ("store", "source", "records replayed", "bytes downloaded", "seconds"):
        table.add_column(col)
    for r in reports:
        table.add_row(
            r.store,
            f"snapshot {r.snapshot_id}" if r.snapshot_id else r.source,
            f"{r.records_replayed:,}",
            f"{r.bytes_downloaded:,}",
            f"{r.seconds:.3f}",
        )
    return table


def _caught_up(status: dict[str, Any]) -> bool:
    live = status.get("task_live") or {}
    return bool(live) and all(t.get("source_lag") == 0 for t in live.values())


def _recover_state(
    spec_path: Path,
    overrides: dict[str, Any],
    work: Path,
    tail: Any,
    problems: list[str],
) -> None:
    """Snapshot the running app, add the tail, lose a task directory, restore it from the
    snapshot plus the tail, and drill the app; appends what went wrong to ``problems``."""
    from statekeeper.generate.producer import produce
    from statekeeper.ops.drill import run_drill
    from statekeeper.ops.restore import restore_app
    from statekeeper.ops.snapshot_app import running_app_status_url, snapshot_running_app
    from statekeeper.snapshots import list_snapshots, storage_for

    console.rule("recovering state: snapshot, restore from snapshot + tail, drill")
    spec = load_app_spec(spec_path)
    settings = spec.resolved_settings(**overrides)
    third = AppProcess(spec_path, overrides, work / "run3.log", stop_when_idle=False)
    third.start()
    try:
        third.wait_for(_caught_up, 300)
        url = running_app_status_url(settings)
        if url is None:
            problems.append("the running app's status endpoint did not answer")
            return
        request = snapshot_running_app(url, timeout_s=300)
        if request.get("state") != "uploaded":
            problems.append(f"snapshot of the running app: {request.get('errors')}")
            return
        storage = storage_for(settings)
        manifests = {m.snapshot_id: m for m in list_snapshots(storage)}
        console.print(_snapshot_table(request, manifests))
        behind = third.status() or {}
        before = (behind.get("totals") or {}).get("records_processed", 0)
        summary = produce(settings.bootstrap_servers, spec.params["input_topic"], tail)
        console.print(f"produced {summary.records:,} more events after the snapshot (the tail)")
        third.wait_for(
            lambda s: (
                (s.get("totals") or {}).get("records_processed", 0) > before and _caught_up(s)
            ),
            300,
        )
    finally:
        third.terminate()
        third.wait(120)
    shutil.rmtree(work / "state" / spec.application_id / DROPPED_TASK, ignore_errors=True)
    console.print(f"[yellow]app stopped; deleted the state directory of task {DROPPED_TASK}[/]")
    topology = spec.build_topology()
    reports = restore_app(settings, topology, storage, tasks=[DROPPED_TASK])
    console.print(_recovered_table(reports))
    if not any(r.source == "snapshot" for r in reports):
        problems.append(f"task {DROPPED_TASK} did not come back from its snapshot")
    record = run_drill(settings, topology, storage, say=lambda line: console.print(f"  {line}"))
    age = record.snapshot_age_s
    console.print(
        f"drill {record.drill_id}: {'[green]passed[/]' if record.passed else '[red]failed[/]'} — "
        f"RTO {record.rto_s:.2f} s, RPO: snapshot age "
        f"{'n/a' if age is None else f'{age:.0f} s'}, {record.changelog_records_behind:,} "
        f"changelog records after the restored markers, {record.records_replayed:,} replayed"
    )
    console.print(f"drill report: {record.report_html}")
    if not record.passed:
        problems += [f"drill: {line}" for line in record.failures()]


def _spark_recompute(bootstrap: str, topic: str) -> Any:
    from statekeeper.spark.session_env import batch_session

    from . import reference_spark

    spark, made_here = batch_session("local[2]", "statekeeper-demo-recompute")
    try:
        df = (
            spark.read.format("statekeeper_kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        return reference_spark.recompute(df)
    finally:
        if made_here:
            spark.stop()


def _compare(name: str, got: Any, want: Any, problems: list[str]) -> None:
    if got == want:
        console.print(f"  [green]✓[/] {name}: {len(got):,} entries equal the recomputation")
    else:
        problems.append(f"{name}: got {len(got):,} entries, recomputation has {len(want):,}")


def run(patients: int = 40, minutes: float = 30.0, seed: int = 7) -> int:
    """Run the demo; 0 if every store and output equals the recomputation, else 1."""
    from statekeeper.app.store_reader import read_store
    from statekeeper.generate.producer import produce
    from statekeeper.kafka.topic_reader import read_topic
    from statekeeper.processing.dlq import dlq_topic
    from statekeeper.processing.output_reader import read_deduped, source_positions

    from . import reference
    from .generator import patient_events

    work = Path("var/demo").resolve()
    shutil.rmtree(work, ignore_errors=True)
    spec_path = spark_app_spec("patient_monitoring")
    spec = load_app_spec(spec_path)
    console.rule("statekeeper demo: patient_monitoring on Spark")
    with EmbeddedBroker() as broker:
        bootstrap = broker.bootstrap_servers
        topic = spec.params["input_topic"]
        events = patient_events(patients=patients, minutes=minutes, seed=seed)
        summary = produce(bootstrap, topic, events, partitions=PARTITIONS, progress=True)
        console.print(
            f"embedded broker on {bootstrap}: produced {summary.records:,} events of "
            f"{patients} patients over {minutes:g} min to {topic!r} "
            f"(malformed {sum(summary.malformed_by_kind.values())}, "
            f"late {sum(summary.late_by_kind.values())})"
        )
        overrides: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "state_dir": str(work / "state"),
            "checkpoint_dir": str(work / "checkpoints"),
            "status_file": str(work / "status.json"),
            "max_records_per_batch": 10_000,
        }
        first = AppProcess(spec_path, overrides, work / "run1.log", stop_when_idle=False)
        console.print("starting the app (Spark local[2]); the first batch takes a few seconds")
        first.start()
        status = first.wait_for(lambda s: (s.get("last_batch") or {}).get("batch_id", -1) >= 2, 300)
        first.kill9()
        done = status["totals"]["records_processed"]
        console.print(
            f"[red]kill -9[/] of the app after batch {status['last_batch']['batch_id']} "
            f"({done:,} records processed so far)"
        )
        task_dir = work / "state" / spec.application_id / DROPPED_TASK
        shutil.rmtree(task_dir, ignore_errors=True)
        console.print(f"[yellow]deleted the state directory of task {DROPPED_TASK}[/]")

        second = AppProcess(spec_path, overrides, work / "run2.log", stop_when_idle=True)
        second.start()
        if second.wait(600) != 0:
            console.print(f"[red]the restarted app failed; see {work / 'run2.log'}[/]")
            return 1
        status = second.status() or {}
        console.print(_restore_table(status))
        totals = status.get("totals", {})
        console.print(
            f"restarted run: {totals.get('records_processed', 0):,} records processed, "
            f"{totals.get('records_late_dropped', 0):,} late pulses dropped, "
            f"{totals.get('records_dlq', 0):,} malformed records sent to the DLQ"
        )

        problems: list[str] = []
        dropped = (status.get("tasks") or {}).get(DROPPED_TASK, {}).get("restore") or []
        if not dropped or not all(r["full"] for r in dropped):
            problems.append(f"task {DROPPED_TASK} lost its state but no full restore was reported")

        tail = patient_events(
            patients=patients,
            minutes=max(1.0, minutes / 6),
            seed=seed + 1,
            start_ms=TAIL_START_MS + int(minutes * 60_000),
        )
        _recover_state(spec_path, overrides, work, tail, problems)

        alerts = [json.loads(r.value) for r in read_deduped(bootstrap, spec.params["alerts_topic"])]
        console.print(f"[bold]alerts raised: {len(alerts):,}[/] (heart rate > 100 and > 100.4 °F)")

        console.rule("check against a Spark batch recomputation of the input topic")
        expected = _spark_recompute(bootstrap, topic)
        python_ref = reference.recompute(read_topic(bootstrap, topic))
        settings = spec.resolved_settings(**overrides)
        topology = spec.build_topology()
        windows = read_store(settings, topology, "pulse-counts", PARTITIONS)
        table = read_store(settings, topology, "heart-rate", PARTITIONS)
        _compare("pulse-counts (60 s windows)", windows, expected.pulse_windows, problems)
        _compare("heart-rate (table)", table, expected.heart_rate, problems)
        key = lambda a: json.dumps(a, sort_keys=True)  # noqa: E731
        _compare(
            "patient-alerts (deduplicated output)",
            sorted(alerts, key=key),
            sorted(expected.alerts, key=key),
            problems,
        )
        dlq = source_positions(read_deduped(bootstrap, dlq_topic(spec.application_id)))
        _compare("DLQ (malformed inputs)", sorted(dlq), sorted(expected.dlq), problems)
        if python_ref.pulse_windows != expected.pulse_windows:
            problems.append("the Spark and pure-Python recomputations disagree")

        console.rule("operating it from Airflow: the snapshot, drill and audit DAGs, once each")
        from .demo_dags import run_dags

        problems += run_dags(spec_path, overrides, say=console.print)
    for problem in problems:
        console.print(f"  [red]✗[/] {problem}")
    if problems:
        return 1
    console.print(
        "[bold green]state after kill -9, a lost task directory and a restore from "
        "snapshot + tail is exact: nothing lost, nothing applied twice[/]"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of the demo; the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m spark_apps.patient_monitoring.demo",
        description="patient_monitoring on Spark end to end: kill -9, lost task state, "
        "exact recovery",
    )
    parser.add_argument("--patients", type=positive_int, default=40)
    parser.add_argument("--minutes", type=positive_float, default=30.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    return run(args.patients, args.minutes, args.seed)


if __name__ == "__main__":
    raise SystemExit(main())
