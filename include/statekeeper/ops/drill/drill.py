"""Run one restore drill: sandbox restore, the four checks, the record, history and report.

See :mod:`statekeeper.ops.drill` for what each check does and where everything is written.
A drill that cannot finish (bad input, broker down, a bug) is recorded as ``error``
(:func:`record_error`): record, history row and report are written with what it got to, and
the exception goes on to the caller.
"""

from __future__ import annotations

import shutil
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from statekeeper.errors import ConfigError, StatekeeperError
from statekeeper.ops.drill.consistency import check_consistency
from statekeeper.ops.drill.history import DrillHistory, drills_root, history_path
from statekeeper.ops.drill.integrity import check_integrity
from statekeeper.ops.drill.quality import run_quality
from statekeeper.ops.drill.recompute import check_truth
from statekeeper.ops.drill.record import DrillRecord, StoreDrill
from statekeeper.ops.drill.report_html import render_report
from statekeeper.ops.drill.rpo import measure_rpo, snapshot_age_s
from statekeeper.ops.drill.sandbox import restore_sandbox
from statekeeper.ops.drill.spark_check import SparkStoreModel, check_with_spark
from statekeeper.settings import StatekeeperSettings
from statekeeper.snapshots.install import LATEST
from statekeeper.snapshots.manifest import utc_now
from statekeeper.snapshots.storage import SnapshotStorage

Say = Callable[[str], None]


def default_report_dir(settings: StatekeeperSettings, drill_id: str) -> Path:
    """``<state_dir>/.drills/<app>/<drill id>``."""
    return drills_root(settings.state_dir) / settings.application_id / drill_id


def _check_sandbox(settings: StatekeeperSettings, sandbox: Path) -> None:
    live = (Path(settings.state_dir) / settings.application_id).resolve()
    if sandbox.resolve() == live or sandbox.resolve().is_relative_to(live):
        raise ConfigError(f"the drill's sandbox {sandbox} lies inside the live state {live}")


def new_record(
    settings: StatekeeperSettings, report_dir: Path | None = None, from_snapshot: str = LATEST
) -> DrillRecord:
    """A drill's record before it runs: its id, start time and report directory (created).
    Raises ConfigError when the sandbox would lie inside the live state."""
    now = utc_now()
    drill_id = f"{now.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    report = Path(report_dir or default_report_dir(settings, drill_id)).resolve()
    sandbox = report / f".sandbox-{drill_id}"
    _check_sandbox(settings, sandbox)
    report.mkdir(parents=True, exist_ok=True)
    return DrillRecord(
        drill_id=drill_id,
        app=settings.application_id,
        started_at=now.isoformat(),
        from_snapshot=from_snapshot,
        sandbox=str(sandbox),
        report_dir=str(report),
    )


def describe_error(exc: BaseException) -> str:
    """An error for the record: a statekeeper error's message says it all; anything else
    also names its type."""
    if isinstance(exc, StatekeeperError):
        return str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {exc}"


def record_error(
    settings: StatekeeperSettings, record: DrillRecord, exc: BaseException, say: Say | None = None
) -> None:
    """Mark ``record`` errored by ``exc`` and write it (record.json, history row, report),
    keeping whatever it found before the error. Writing is best effort: a failure to write
    is said, never raised over the original error."""
    record.error = describe_error(exc)
    if not isinstance(exc, StatekeeperError):
        record.notes.append("".join(traceback.format_exception(exc)).strip())
    record.finished_at = utc_now().isoformat()
    if not record.wall_s:
        started = datetime.fromisoformat(record.started_at)
        finished = datetime.fromisoformat(record.finished_at)
        record.wall_s = max(0.0, (finished - started).total_seconds())
    try:
        write_outputs(settings, record)
    except Exception as write_exc:  # noqa: BLE001 - the drill's own error matters more
        if say is not None:
            say(f"could not record the error: {describe_error(write_exc)}")


def run_drill(
    settings: StatekeeperSettings,
    topology: Any,
    storage: SnapshotStorage | None,
    *,
    report_dir: Path | None = None,
    from_snapshot: str = LATEST,
    say: Say | None = None,
    keep_sandbox: bool = False,
    spark_models: list[SparkStoreModel] | None = None,
    record: DrillRecord | None = None,
) -> DrillRecord:
    """Drill the app of ``settings``/``topology``; returns the record (already written to
    ``report_dir``, the history and ``report.html``). ``storage`` None: no snapshots, every
    store is replayed from its changelog. ``spark_models``: the app's PySpark SQL
    recomputations (``drill --spark``), checked as ``spark`` on the stores they cover.
    ``record``: one made by :func:`new_record` (else made here, from ``report_dir`` and
    ``from_snapshot``). An exception is recorded (:func:`record_error`), then raised."""
    say = say or (lambda _: None)
    if record is None:
        record = new_record(settings, report_dir, from_snapshot)
    started = time.perf_counter()
    try:
        _run(settings, topology, storage, record, say, keep_sandbox, spark_models)
    except Exception as exc:
        record.wall_s = time.perf_counter() - started
        say(f"drill {record.drill_id} errored: {describe_error(exc)}")
        record_error(settings, record, exc, say)
        raise
    record.finished_at = utc_now().isoformat()
    record.wall_s = time.perf_counter() - started
    write_outputs(settings, record)
    return record


def _run(
    settings: StatekeeperSettings,
    topology: Any,
    storage: SnapshotStorage | None,
    record: DrillRecord,
    say: Say,
    keep_sandbox: bool,
    spark_models: list[SparkStoreModel] | None,
) -> None:
    """The drill itself, filling ``record`` as it goes (so an error keeps what was found)."""
    now = datetime.fromisoformat(record.started_at)
    report_dir, sandbox = Path(record.report_dir), Path(record.sandbox)
    try:
        restore = restore_sandbox(
            settings,
            topology,
            storage,
            sandbox / "restore",
            from_snapshot=record.from_snapshot,
            say=say,
        )
        record.rto_s = restore.rto_s
        say(f"restored {len(restore.tasks)} task(s) in {restore.rto_s:.3f} s (RTO)")
        phases = record.phase_s
        phases["restore"] = restore.rto_s
        t0 = time.perf_counter()
        rpo = measure_rpo(settings, topology, restore.tasks)
        record.source_records_behind = rpo.source_records_behind
        phases["rpo"] = time.perf_counter() - t0
        drills: dict[tuple[str, str], StoreDrill] = {}
        for task in restore.tasks:
            for name, store in task.stores.items():
                lag = rpo.changelogs.get((task.task_id, name))
                drills[(task.task_id, name)] = StoreDrill(
                    task=task.task_id,
                    store=name,
                    kind=store.spec.kind,
                    source=store.source,
                    snapshot_id=store.snapshot_id,
                    records_replayed=store.records_replayed,
                    bytes_downloaded=store.bytes_downloaded,
                    key_count=len(store.contents),
                    batch_id=store.metadata.batch_id,
                    marker_offset=store.metadata.changelog_offset,
                    source_offsets=dict(store.metadata.source_offsets),
                    committed_records_behind=None if lag is None else lag.committed,
                    snapshot_age_s=(
                        snapshot_age_s(store.manifest.created, now) if store.manifest else None
                    ),
                    changelog_records_behind=None if lag is None else lag.offsets,
                )
        record.stores = list(drills.values())
        _totals(record)
        for task in restore.tasks:
            say(f"checking task {task.task_id}")
            t0 = time.perf_counter()
            mode, consistency = check_consistency(settings, task)
            record.live_mode[task.task_id] = mode
            t1 = time.perf_counter()
            truth = check_truth(settings, topology, task, sandbox / "recompute")
            t2 = time.perf_counter()
            phases["consistency"] = phases.get("consistency", 0.0) + t1 - t0
            phases["truth"] = phases.get("truth", 0.0) + t2 - t1
            for name, store in task.stores.items():
                drill = drills[(task.task_id, name)]
                t0 = time.perf_counter()
                drill.checks["integrity"] = check_integrity(task, store, storage)
                phases["integrity"] = phases.get("integrity", 0.0) + time.perf_counter() - t0
                drill.checks["consistency"] = consistency[name]
                drill.checks["truth"] = truth[name]
        if spark_models:
            say("recomputing with PySpark SQL")
            t0 = time.perf_counter()
            spark = check_with_spark(settings, topology, restore.tasks, spark_models)
            phases["spark"] = time.perf_counter() - t0
            for key, result in spark.items():
                drills[key].checks["spark"] = result
            covered = {m.store for m in spark_models}
            record.notes.append(f"spark check on store(s) {sorted(covered)}")
        say("validating with Great Expectations")
        t0 = time.perf_counter()
        quality = run_quality(
            [(t.task_id, s) for t in restore.tasks for s in t.stores.values()],
            report_dir / "data_docs",
        )
        phases["quality"] = time.perf_counter() - t0
        for key, result in quality.results.items():
            drills[key].checks["quality"] = result
            drills[key].data_docs = quality.pages.get(key)
        record.data_docs_index = quality.index
        if storage is None:
            record.notes.append("no snapshot storage: every store was replayed from its changelog")
    finally:
        if not keep_sandbox:
            shutil.rmtree(sandbox, ignore_errors=True)


def _totals(record: DrillRecord) -> None:
    """The record's RPO and restore totals from its stores."""
    stores = record.stores
    ages = [d.snapshot_age_s for d in stores if d.snapshot_age_s is not None]
    record.snapshot_age_s = max(ages) if ages else None
    record.committed_records_behind = sum(d.committed_records_behind or 0 for d in stores)
    record.changelog_records_behind = sum(d.changelog_records_behind or 0 for d in stores)
    record.records_replayed = sum(d.records_replayed for d in stores)
    record.bytes_downloaded = sum(d.bytes_downloaded for d in stores)


def write_outputs(settings: StatekeeperSettings, record: DrillRecord) -> None:
    """record.json, the history row, then report.html (whose trend includes this drill)."""
    report_dir = Path(record.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    record.report_html = str(report_dir / "report.html")
    (report_dir / "record.json").write_text(record.to_json())
    history = DrillHistory(history_path(settings.state_dir))
    history.append(record)
    (report_dir / "report.html").write_text(
        render_report(record, history.rows(settings.application_id))
    )
