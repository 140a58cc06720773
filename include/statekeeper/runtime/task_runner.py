"""Runs one task's share of a micro-batch on a Spark executor (DESIGN.md R3).

lock → open stores (restore if needed) → skip processed offsets → read the task's offset
ranges from Kafka → process → flush outputs → commit (changelog, markers, stores) → unlock
→ return metrics. The task reads its ranges itself (R2): Spark carries only offsets.
"""

from __future__ import annotations

import functools
import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.model import OffsetRange, tp_key
from statekeeper.settings import StatekeeperSettings


@dataclass(frozen=True)
class TaskRun:
    """One task's work in one micro-batch (picklable; built on the driver)."""

    task_id: str
    subtopology: int
    partition: int
    ranges: tuple[OffsetRange, ...]
    batch_id: int
    batch_time_ms: int


@dataclass
class TaskRunResult:
    """What a task reports back to the driver."""

    task_id: str
    batch_id: int
    committed: bool
    records_read: int = 0
    records_processed: int = 0
    records_skipped: int = 0
    records_late_dropped: int = 0
    records_dlq: int = 0
    records_output: int = 0
    committed_offsets: dict[str, int] = field(default_factory=dict)
    restored: list[dict[str, Any]] = field(default_factory=list)
    store_entries: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _WorkerServices:
    """Per-process clients, reused across tasks when Spark reuses the Python worker.

    Nothing depends on reuse for correctness (Spark reuses workers at random); it only
    saves connecting a producer and restorer per task.
    """

    def __init__(self, settings: StatekeeperSettings) -> None:
        from statekeeper.runtime.kafka_sink import OutputProducer
        from statekeeper.runtime.restore_progress import RestoreProgressFile
        from statekeeper.state.environment import StateEnvironment

        self.settings = settings
        self.progress = RestoreProgressFile()
        self.env = StateEnvironment(settings, [self.progress], check_broker=False)
        self.outputs = OutputProducer(settings.bootstrap_servers)
        self.consumer_conf = consumer_config(
            settings.bootstrap_servers, group_id=f"{settings.application_id}-tasks"
        )


@functools.lru_cache(maxsize=4)
def _services(settings_json: str) -> _WorkerServices:
    return _WorkerServices(StatekeeperSettings.model_validate_json(settings_json))


def run_task(run: TaskRun, topology: Any, settings_json: str) -> TaskRunResult:
    """Execute ``run`` against its stores and commit it; returns the task's metrics."""
    from statekeeper.kafka.range_reader import read_range_runs
    from statekeeper.runtime.task import StreamTask

    services = _services(settings_json)
    settings = services.settings
    timings: dict[str, float] = {}
    started = time.perf_counter()

    specs = topology.store_specs(run.subtopology)
    state = services.env.task(run.task_id, run.partition, specs)
    services.progress.begin(state.task_dir.path)
    outcomes = state.open()
    timings["open"] = time.perf_counter() - started
    try:
        processed = state.processed_offsets
        todo = []
        for r in run.ranges:
            start = max(r.start, processed.get(tp_key(r.topic, r.partition), 0))
            if start < r.end:
                todo.append(OffsetRange(r.topic, r.partition, start, r.end))
        skipped = sum(r.count for r in run.ranges) - sum(r.count for r in todo)
        committed_offsets = dict(processed)
        for r in run.ranges:
            key = tp_key(r.topic, r.partition)
            committed_offsets[key] = max(committed_offsets.get(key, 0), r.end)
        result = TaskRunResult(run.task_id, run.batch_id, committed=False)
        result.records_skipped = skipped
        if todo:
            t0 = time.perf_counter()
            records = read_range_runs(services.consumer_conf, todo, settings.broker_timeout_s)
            timings["read"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            task = StreamTask(
                topology,
                run.subtopology,
                run.partition,
                state,
                services.outputs,
                settings.application_id,
            )
            batch = task.process_batch(run.batch_id, run.batch_time_ms, records)
            timings["process"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            services.outputs.flush(settings.broker_timeout_s * 2)
            state.commit(run.batch_id, committed_offsets)
            timings["commit"] = time.perf_counter() - t0
            result.committed = True
            result.records_read = batch.records_read
            result.records_processed = batch.records_processed
            result.records_skipped += batch.records_skipped
            result.records_late_dropped = batch.records_late_dropped
            result.records_dlq = batch.records_dlq
            result.records_output = batch.records_output
        result.committed_offsets = committed_offsets
        result.restored = [
            {
                "store": o.job.store.name,
                "full": o.full,
                "reason": o.job.reason,
                "start_offset": o.start_offset,
                "records": o.restored_records,
                "seconds": round(o.seconds, 4),
            }
            for o in outcomes
        ]
        result.store_entries = {
            name: store.approximate_num_entries() for name, store in state.stores.items()
        }
    finally:
        state.close()
    timings["total"] = time.perf_counter() - started
    result.seconds = {k: round(v, 4) for k, v in timings.items()}
    return result


def settings_to_json(settings: StatekeeperSettings) -> str:
    """Settings as the JSON string executors rebuild them from (stable, cache key)."""
    return json.dumps(json.loads(settings.model_dump_json()), sort_keys=True)
