"""``statekeeper backfill --store S``: fill a store the app has not written yet from its
inputs' history, without running the rest of the app.

The case: a new version adds a store (patient_monitoring_v2's ``temperature-peaks``); the
migration carries the other stores and leaves it empty, so it would count only from the
takeover on. Filling it makes it hold what it would hold had this version processed the
whole retained input.

Per task of the store's subtopology, the app stopped: the task is opened (its lock, its last
commit: batch id ``B`` and source offsets ``O``, where every store of it stands); the
subtopology is re-run in a sandbox (:mod:`statekeeper.processing.sandbox_run`: unlogged
stores, outputs dropped) over the task's source partitions from the log start up to ``O``;
the store's entries are written to the task and committed at ``B`` and ``O`` again (the
other stores are not touched); then the store is snapshotted (``--no-snapshot``: not; the
other stores' newest snapshots still hold). The
app's next start continues from ``O`` with the store as full as the others.

Crash-safe: ``<state root>/store-fills.json`` records a task as pending (at ``B``, ``O``)
before its entries are written. A run killed before the commit leaves uncommitted writes,
which the next open reverts (the store is empty again and is filled again); one killed after
it leaves the store full at ``B``, ``O``, which the pending record says is this fill's: left
as it is.

Refused (one line, nothing written): a store the topology does not have or that is not
logged; a store in a subtopology that reads a repartition topic (its history is the
upstream subtopology's output: backfill the whole app); a task of the store that holds
entries this fill did not write; the app running. A task that never committed is left to
the stream (it starts from the beginning anyway).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.atomic_file import replace_text
from statekeeper.errors import ConfigError
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.model import OffsetRange, tp_key
from statekeeper.kafka.offsets import log_start_offsets
from statekeeper.kafka.range_reader import read_ranges
from statekeeper.processing.sandbox_run import run_in_sandbox
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.environment import StateEnvironment
from statekeeper.state.task_id import TaskId
from statekeeper.stores.typed import put_entries, typed_entries
from statekeeper.versions.recorded import read_recorded, state_root

FILLS_FILE = "store-fills.json"


@dataclass
class TaskFill:
    """One task: what it committed at, the input records re-run, entries written, and a
    note when nothing was written (never committed, or filled already)."""

    task_id: str
    batch_id: int | None
    source_offsets: dict[str, int] = field(default_factory=dict)
    records: int = 0
    entries: int = 0
    dropped: int = 0  # window entries past the store's retention at the task's stream time
    snapshots: list[str] = field(default_factory=list)
    note: str | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task_id,
            "batch_id": self.batch_id,
            "source_offsets": dict(self.source_offsets),
            "records": self.records,
            "entries": self.entries,
            "dropped": self.dropped,
            "snapshots": list(self.snapshots),
            "note": self.note,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class StoreFillReport:
    """Every task's fill of one store."""

    application_id: str
    store: str
    tasks: list[TaskFill] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "application_id": self.application_id,
            "store": self.store,
            "tasks": [t.as_dict() for t in self.tasks],
            "records": sum(t.records for t in self.tasks),
            "entries": sum(t.entries for t in self.tasks),
            "seconds": round(self.seconds, 3),
        }

    def text(self) -> str:
        lines = [
            f"store {self.store} of {self.application_id}: "
            f"{sum(t.entries for t in self.tasks)} entries from "
            f"{sum(t.records for t in self.tasks)} input records in {self.seconds:.1f}s"
        ]
        lines += [
            f"  task {t.task_id}: "
            + (t.note or f"{t.entries} entries ({t.records} records) at batch {t.batch_id}")
            for t in self.tasks
        ]
        return "\n".join(lines)


def fill_store(
    settings: StatekeeperSettings,
    topology: Any,
    store: str,
    *,
    snapshot: bool = True,
    progress: Callable[[TaskFill], None] | None = None,
) -> StoreFillReport:
    """Fill ``store`` in every task of its subtopology (module docstring): as many tasks as
    its source topics have partitions."""
    started = time.perf_counter()
    app = settings.application_id
    sub = _subtopology_of(topology, store, app)
    partitions = _task_count(settings, topology, sub)
    report = StoreFillReport(app, store)
    fills = _Fills(state_root(settings.state_dir, app) / FILLS_FILE)
    env = StateEnvironment(settings)
    try:
        for p in range(partitions):
            task = _fill_task(settings, topology, env, fills, store, TaskId(sub, p), snapshot)
            report.tasks.append(task)
            if progress is not None:
                progress(task)
    finally:
        env.close()
    report.seconds = time.perf_counter() - started
    return report


def _fill_task(
    settings: StatekeeperSettings,
    topology: Any,
    env: StateEnvironment,
    fills: _Fills,
    store: str,
    tid: TaskId,
    snapshot: bool,
) -> TaskFill:
    began = time.perf_counter()
    task_id = str(tid)
    specs = topology.store_specs(tid.subtopology)
    state = env.task(task_id, tid.partition, specs)
    state.open()
    try:
        batch, offsets = state.last_batch_id, dict(state.committed_offsets)
        result = TaskFill(task_id, batch, offsets)
        if batch is None or batch < 0:
            result.note = "never committed: the stream fills it from the start"
            return result
        target = state.store(store)
        holds = _holds_entries(target)
        if holds:
            if fills.pending(store, task_id) == (batch, offsets):
                result.note = f"filled already (batch {batch}): left as it is"
                return result
            raise ConfigError(
                f"store {store} of task {task_id} holds entries this fill did not write: "
                "backfill --store fills a store the app has not written yet (a new one after "
                "a migration); to rebuild a store, backfill the whole app"
            )
        ranges = _history(settings, topology, tid, offsets)
        records = (
            read_ranges(
                consumer_config(settings.bootstrap_servers), ranges, settings.broker_timeout_s
            )
            if ranges
            else {}
        )
        result.records = sum(len(r) for r in records.values())
        with tempfile.TemporaryDirectory(prefix=f"statekeeper-fill-{task_id}-") as sandbox:
            entries = run_in_sandbox(
                settings,
                topology,
                task_id,
                tid.subtopology,
                tid.partition,
                specs,
                records,
                Path(sandbox),
                lambda sandboxed: list(typed_entries(sandboxed.store(store))),
                batch_id=batch,
            )
        fills.mark_pending(store, task_id, batch, offsets)
        result.entries, result.dropped = put_entries(target, entries)
        state.commit(batch, offsets)
        if snapshot:
            result.snapshots = _snapshot(settings, state, store)  # the others' stand
    finally:
        state.close()
    result.seconds = time.perf_counter() - began
    return result


def _subtopology_of(topology: Any, store: str, app: str) -> int:
    for sub in topology.subtopologies:
        for spec in topology.store_specs(sub.id):
            if spec.name != store:
                continue
            if not spec.logging_enabled:
                raise ConfigError(
                    f"store {store} is not logged: a fill is committed through its changelog"
                )
            fed = [ref.resolve(app) for ref in sub.source_refs if ref.repartition]
            if fed:
                raise ConfigError(
                    f"store {store} is in subtopology {sub.id}, which reads repartition topic "
                    f"{fed[0]}: its history is the upstream subtopology's output; backfill the "
                    "whole app instead (statekeeper backfill without --store)"
                )
            return int(sub.id)
    raise ConfigError(f"the topology has no store {store!r}")


def _history(
    settings: StatekeeperSettings,
    topology: Any,
    tid: TaskId,
    offsets: dict[str, int],
) -> list[OffsetRange]:
    """The task's source partitions from their log start to its committed offsets."""
    app = settings.application_id
    tps = [
        (t, tid.partition)
        for t in topology.subtopology_topics(app, tid.subtopology)
        if tp_key(t, tid.partition) in offsets
    ]
    if not tps:
        return []
    begins = log_start_offsets(
        consumer_config(settings.bootstrap_servers), tps, settings.broker_timeout_s
    )
    return [
        OffsetRange(t, p, begins[(t, p)], offsets[tp_key(t, p)])
        for t, p in tps
        if offsets[tp_key(t, p)] > begins[(t, p)]
    ]


def _task_count(settings: StatekeeperSettings, topology: Any, sub: int) -> int:
    from statekeeper.app.topics import source_partitions
    from statekeeper.kafka.admin import make_admin

    admin = make_admin(settings.bootstrap_servers)
    counts = source_partitions(admin, topology, settings.application_id, settings.broker_timeout_s)
    topics = topology.subtopology_topics(settings.application_id, sub)
    return max((counts.get(t, 0) for t in topics), default=0)


def _holds_entries(store: Any) -> bool:
    entries = store.all()
    return next(iter(entries), None) is not None


def _snapshot(settings: StatekeeperSettings, state: Any, store: str) -> list[str]:
    from statekeeper.snapshots.create import snapshot_now

    recorded = read_recorded(state_root(settings.state_dir, settings.application_id))
    topology = None if recorded is None else recorded.to_dict()
    return snapshot_now(settings, state, stores=[store], topology=topology)


class _Fills:
    """``store-fills.json``: per store and task, the commit a fill started at."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{self.path} cannot be read: {exc}") from exc
        return data if isinstance(data, dict) else {}

    def pending(self, store: str, task_id: str) -> tuple[int, dict[str, int]] | None:
        entry = self._read().get(store, {}).get(task_id)
        if not isinstance(entry, dict):
            return None
        return int(entry["batch_id"]), {str(k): int(v) for k, v in entry["offsets"].items()}

    def mark_pending(self, store: str, task_id: str, batch: int, offsets: dict[str, int]) -> None:
        data = self._read()
        data.setdefault(store, {})[task_id] = {"batch_id": batch, "offsets": dict(offsets)}
        replace_text(self.path, json.dumps(data, indent=1, sort_keys=True) + "\n", durable=True)
