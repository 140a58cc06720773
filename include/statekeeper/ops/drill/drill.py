"""Run one restore drill: sandbox restore, the four checks, the record, history and report.

See :mod:`statekeeper.ops.drill` for what each check does and where everything is written.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statekeeper.errors import ConfigError
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
) -> DrillRecord:
    """Drill the app of ``settings``/``topology``; returns the record (already written to
    ``report_dir``, the history and ``report.html``). ``storage`` None: no snapshots, every
    store is replayed from its changelog. ``spark_models``: the app's PySpark SQL
    recomputations (``drill --spark``), checked as ``spark`` on the stores they cover."""
    say = say or (lambda _: None)
    now = utc_now()
    drill_id = f"{now.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    report_dir = Path(report_dir or default_report_dir(settings, drill_id)).resolve()
    sandbox = report_dir / f".sandbox-{drill_id}"
    _check_sandbox(settings, sandbox)
    report_dir.mkdir(parents=True, exist_ok=True)
    record = DrillRecord(
        drill_id=drill_id,
        app=settings.application_id,
        started_at=now.isoformat(),
        from_snapshot=from_snapshot,
        sandbox=str(sandbox),
        report_dir=str(report_dir),
    )
    started = time.perf_counter()
    try:
        restore = restore_sandbox(
            settings, topology, storage, sandbox / "restore", from_snapshot=from_snapshot, say=say
        )
        record.rto_s = restore.rto_s
        say(f"restored {len(restore.tasks)} task(s) in {restore.rto_s:.3f} s (RTO)")
        phases = record.phase_s
        phases["restore"] = restore.rto_s
        t0 = time.perf_counter()
        behind, record.source_records_behind = measure_rpo(settings, topology, restore.tasks)
        phases["rpo"] = time.perf_counter() - t0
        drills: dict[tuple[str, str], StoreDrill] = {}
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
                drill = StoreDrill(
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
                    snapshot_age_s=(
                        snapshot_age_s(store.manifest.created, now) if store.manifest else None
                    ),
                    changelog_records_behind=behind.get((task.task_id, name)),
                )
                t0 = time.perf_counter()
                drill.checks["integrity"] = check_integrity(task, store, storage)
                phases["integrity"] = phases.get("integrity", 0.0) + time.perf_counter() - t0
                drill.checks["consistency"] = consistency[name]
                drill.checks["truth"] = truth[name]
                drills[(task.task_id, name)] = drill
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
        record.stores = list(drills.values())
        ages = [d.snapshot_age_s for d in record.stores if d.snapshot_age_s is not None]
        record.snapshot_age_s = max(ages) if ages else None
        record.changelog_records_behind = sum(v for v in behind.values())
        record.records_replayed = sum(d.records_replayed for d in record.stores)
        record.bytes_downloaded = sum(d.bytes_downloaded for d in record.stores)
        if storage is None:
            record.notes.append("no snapshot storage: every store was replayed from its changelog")
    finally:
        if not keep_sandbox:
            shutil.rmtree(sandbox, ignore_errors=True)
    record.finished_at = utc_now().isoformat()
    record.wall_s = time.perf_counter() - started
    _write_outputs(settings, record)
    return record


def _write_outputs(settings: StatekeeperSettings, record: DrillRecord) -> None:
    """record.json, the history row, then report.html (whose trend includes this drill)."""
    report_dir = Path(record.report_dir)
    record.report_html = str(report_dir / "report.html")
    (report_dir / "record.json").write_text(record.to_json())
    history = DrillHistory(history_path(settings.state_dir))
    history.append(record)
    (report_dir / "report.html").write_text(
        render_report(record, history.rows(settings.application_id))
    )
