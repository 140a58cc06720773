"""``GET /metrics``: an app's status document as Prometheus metrics (``statekeeper_*``).

A custom collector reads the status document (the app's :class:`StatusBoard` snapshot) at
each scrape, so the figures are the ones ``/status`` shows, with no second set of counters
to keep in step. Each app gets its own :class:`~prometheus_client.CollectorRegistry`:
nothing lands in prometheus_client's global registry, so many apps (or tests) in one process
never clash.

Metrics and labels (``app`` on all of them):
- app: ``statekeeper_up`` (1 unless ERROR/NOT_RUNNING, as ``/health``),
  ``statekeeper_app_state`` (state set), ``statekeeper_app_info``,
  ``statekeeper_app_start_time_seconds``;
- batches: ``statekeeper_records_{processed,skipped,late_dropped,dlq,output,replayed}_total``,
  ``statekeeper_batches_total``, ``statekeeper_batch_duration_seconds`` (summary: count and
  sum of every batch), ``statekeeper_batch_duration_median_seconds`` (recent window),
  ``statekeeper_records_per_second`` (processing rate since start),
  ``statekeeper_last_batch_{id,records,duration_seconds,timestamp_seconds,records_limit}``,
  ``statekeeper_batch_records_{limit,ceiling,memory_cap}`` (adaptive batches);
- source lag: ``statekeeper_source_lag_records`` (task, topic, partition),
  ``statekeeper_task_source_lag_records`` (task);
- commits: ``statekeeper_task_commit_duration_seconds`` (summary per task: commits this run
  and their seconds), ``statekeeper_task_last_commit_duration_seconds``,
  ``statekeeper_task_committed_batch_id``;
- stores (task, store): ``statekeeper_store_entries`` (RocksDB's estimate),
  ``statekeeper_store_operation_duration_seconds`` (summary per ``operation``: put, get,
  delete, range, ...; multi-key calls count each key, so sum/count is the time per key;
  ``*_entries`` operations count entries scanned, with no time),
  ``statekeeper_store_operation_max_duration_seconds``,
  ``statekeeper_store_restore_records``, ``statekeeper_store_restore_duration_seconds``,
  ``statekeeper_store_restore_records_per_second`` (the task's first open in this run;
  label ``source``: snapshot, changelog, local, ...),
  ``statekeeper_store_restore_progress_records`` (the restore running or last run);
- placement (statekeeper.placement.driver): ``statekeeper_task_moves_total``
  (``reason``: executor lost, not scheduled, to standby), ``statekeeper_task_restores_total``
  (``cause``: start, moved, reopened; ``source``: snapshot, full replay, local state, ...),
  ``statekeeper_stale_copies_closed_total``, ``statekeeper_standby_lag_records`` (task,
  executor, store), ``statekeeper_executors`` (live executors);
- fencing (docs/fencing.md): ``statekeeper_fenced_records_total`` (task; ``kind``: changelog
  records, changelog markers, repartition records), ``statekeeper_stale_results_dropped_total``;
- snapshots: ``statekeeper_snapshot_age_seconds`` (task: since its newest snapshot, uploaded
  in this app run or found in the storage at start), ``statekeeper_snapshot_requests``
  (requests kept, by ``state``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
    SummaryMetricFamily,
)

from statekeeper.app.batch_stats import TOTALS
from statekeeper.app.lifecycle import AppState

#: States in which ``statekeeper_up`` is 0 (the same rule as ``GET /health``).
DOWN_STATES = ("ERROR", "NOT_RUNNING")


class StatusCollector:
    """A prometheus_client collector over a status document, read at each scrape."""

    def __init__(
        self, status: Callable[[], dict[str, Any]], clock: Callable[[], float] = time.time
    ):
        self._status = status
        self._clock = clock

    def describe(self) -> list[Metric]:
        # No fixed description: registering must not call the status (or collect) early.
        return []

    def collect(self) -> Iterator[Metric]:
        doc = self._status()
        app = str(doc.get("application_id", ""))
        yield from _app_metrics(app, doc)
        yield from _batch_metrics(app, doc)
        yield from _lag_metrics(app, doc)
        tasks: dict[str, Any] = doc.get("tasks") or {}
        yield from _commit_metrics(app, tasks)
        yield from _store_metrics(app, tasks, doc.get("task_live") or {})
        yield from _snapshot_metrics(app, doc, self._clock())
        yield from _placement_metrics(app, doc.get("placement") or {})
        yield from _fencing_metrics(app, doc.get("fencing") or {})


class AppMetrics:
    """One app's registry holding its :class:`StatusCollector`; :meth:`render` is the
    ``/metrics`` answer."""

    def __init__(
        self, status: Callable[[], dict[str, Any]], clock: Callable[[], float] = time.time
    ):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StatusCollector(status, clock))  # type: ignore[arg-type]

    def render(self) -> tuple[bytes, str]:
        """(body, content type) in Prometheus' text exposition format."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


def _num(value: Any) -> float | None:
    """A finite number from the document, or None (bools and missing values are skipped)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _app_metrics(app: str, doc: dict[str, Any]) -> Iterator[Metric]:
    state = str(doc.get("state") or "CREATED")
    up = GaugeMetricFamily(
        "statekeeper_up", "1 while the app is not ERROR or NOT_RUNNING", labels=["app"]
    )
    up.add_metric([app], 0.0 if state in DOWN_STATES else 1.0)
    yield up
    states = StateSetMetricFamily(
        "statekeeper_app_state", "App lifecycle state (R5, docs/invariants.md)", labels=["app"]
    )
    states.add_metric([app], {s.value: s.value == state for s in AppState})
    yield states
    info = InfoMetricFamily("statekeeper_app", "Static facts about the app", labels=["app"])
    info.add_metric(
        [app],
        {
            "broker": str(doc.get("broker") or ""),
            "processing_guarantee": str(doc.get("processing_guarantee") or ""),
            "pid": str(doc.get("pid") or ""),
        },
    )
    yield info
    yield from _gauge(
        "statekeeper_app_start_time_seconds",
        "When the app process started (epoch seconds)",
        app,
        doc.get("started_at"),
    )


def _batch_metrics(app: str, doc: dict[str, Any]) -> Iterator[Metric]:
    totals = doc.get("totals") or {}
    for key in TOTALS:
        counter = CounterMetricFamily(
            f"statekeeper_{key}",
            f"{key.replace('_', ' ').capitalize()} since start",
            labels=["app"],
        )
        counter.add_metric([app], float(totals.get(key) or 0))
        yield counter
    throughput = doc.get("throughput") or {}
    batches = int(throughput.get("batches") or 0)
    counter = CounterMetricFamily("statekeeper_batches", "Micro-batches completed", labels=["app"])
    counter.add_metric([app], float(batches))
    yield counter
    summary = SummaryMetricFamily(
        "statekeeper_batch_duration_seconds",
        "Driver time per micro-batch (plan, run the tasks, record)",
        labels=["app"],
    )
    summary.add_metric([app], batches, float(throughput.get("batch_seconds_sum") or 0.0))
    yield summary
    yield from _gauge(
        "statekeeper_batch_duration_median_seconds",
        "Median micro-batch time over the recent window",
        app,
        throughput.get("batch_seconds_p50"),
    )
    yield from _gauge(
        "statekeeper_records_per_second",
        "Records processed per second of batch time since start",
        app,
        throughput.get("records_per_s_processing"),
    )
    last = doc.get("last_batch") or {}
    for name, key, help_text in (
        ("statekeeper_last_batch_id", "batch_id", "Id of the last completed micro-batch"),
        ("statekeeper_last_batch_records", "records", "Records the last micro-batch processed"),
        ("statekeeper_last_batch_duration_seconds", "seconds", "The last micro-batch's time"),
        ("statekeeper_last_batch_timestamp_seconds", "finished_at", "When it finished (epoch s)"),
        (
            "statekeeper_last_batch_records_limit",
            "records_limit",
            "Source records the last micro-batch could admit (adaptive batches)",
        ),
    ):
        yield from _gauge(name, help_text, app, last.get(key))
    sizing = doc.get("batch_sizing") or {}
    for name, key, help_text in (
        ("statekeeper_batch_records_limit", "next_limit", "Records the next batch may admit"),
        ("statekeeper_batch_records_ceiling", "ceiling", "max_records_per_batch"),
        (
            "statekeeper_batch_records_memory_cap",
            "memory_cap",
            "The batch size batch_memory_mb allows at the sampled record size",
        ),
    ):
        yield from _gauge(name, help_text, app, sizing.get(key))


def _gauge(name: str, help_text: str, app: str, value: Any) -> Iterator[Metric]:
    """One app-level gauge, left out while the document has no value for it."""
    number = _num(value)
    if number is not None:
        gauge = GaugeMetricFamily(name, help_text, labels=["app"])
        gauge.add_metric([app], number)
        yield gauge


def _lag_metrics(app: str, doc: dict[str, Any]) -> Iterator[Metric]:
    partitions = GaugeMetricFamily(
        "statekeeper_source_lag_records",
        "Source records not yet processed (log end - position) per source partition",
        labels=["app", "task", "topic", "partition"],
    )
    for entry in doc.get("source_partitions") or []:
        end, position = _num(entry.get("end")), _num(entry.get("position"))
        if end is not None and position is not None:
            labels = [app, str(entry.get("task")), str(entry.get("topic")), str(entry["partition"])]
            partitions.add_metric(labels, max(0.0, end - position))
    yield partitions
    tasks = GaugeMetricFamily(
        "statekeeper_task_source_lag_records",
        "Source records not yet processed, summed over the task's source partitions",
        labels=["app", "task"],
    )
    for tid, live in sorted((doc.get("task_live") or {}).items()):
        lag = _num((live or {}).get("source_lag"))
        if lag is not None:
            tasks.add_metric([app, tid], lag)
    yield tasks


def _commit_metrics(app: str, tasks: dict[str, Any]) -> Iterator[Metric]:
    labels = ["app", "task"]
    summary = SummaryMetricFamily(
        "statekeeper_task_commit_duration_seconds",
        "Commits of the task's state in this app run (changelog markers + store write; tasks "
        "committed together share one group commit's time)",
        labels=labels,
    )
    last = GaugeMetricFamily(
        "statekeeper_task_last_commit_duration_seconds",
        "The task's last commit time",
        labels=labels,
    )
    batch = GaugeMetricFamily(
        "statekeeper_task_committed_batch_id",
        "The last micro-batch the task's state committed",
        labels=labels,
    )
    for tid, task in sorted(tasks.items()):
        commits = task.get("commits") or {}
        if commits:
            summary.add_metric(
                [app, tid], int(commits.get("count") or 0), float(commits.get("seconds_sum") or 0)
            )
            last.add_metric([app, tid], float(commits.get("last_seconds") or 0.0))
        committed = _num(task.get("committed_batch_id"))
        if committed is not None:
            batch.add_metric([app, tid], committed)
    yield from (summary, last, batch)


def _store_metrics(app: str, tasks: dict[str, Any], live: dict[str, Any]) -> Iterator[Metric]:
    labels = ["app", "task", "store"]
    entries = GaugeMetricFamily(
        "statekeeper_store_entries",
        "Entries in the store (RocksDB's estimate: counts tombstones and overwrites not yet "
        "compacted)",
        labels=labels,
    )
    ops = SummaryMetricFamily(
        "statekeeper_store_operation_duration_seconds",
        "Metered store operations in this app run and their time",
        labels=[*labels, "operation"],
    )
    op_max = GaugeMetricFamily(
        "statekeeper_store_operation_max_duration_seconds",
        "Longest single call of the operation in this app run",
        labels=[*labels, "operation"],
    )
    restore_labels = [*labels, "source"]
    restored = GaugeMetricFamily(
        "statekeeper_store_restore_records",
        "Records the store's restore applied when its task first opened in this run",
        labels=restore_labels,
    )
    restore_s = GaugeMetricFamily(
        "statekeeper_store_restore_duration_seconds",
        "Time of that restore",
        labels=restore_labels,
    )
    restore_rate = GaugeMetricFamily(
        "statekeeper_store_restore_records_per_second",
        "Records per second of that restore",
        labels=restore_labels,
    )
    progress = GaugeMetricFamily(
        "statekeeper_store_restore_progress_records",
        "Records restored so far by the store's running (or last) restore",
        labels=labels,
    )
    for tid, task in sorted(tasks.items()):
        for store, count in sorted((task.get("store_entries_approx") or {}).items()):
            if _num(count) is not None:
                entries.add_metric([app, tid, store], float(count))
        for store, operations in sorted((task.get("store_operations") or {}).items()):
            for op, stats in sorted(operations.items()):
                key = [app, tid, store, op]
                ops.add_metric(
                    key, int(stats.get("count") or 0), (stats.get("total_ns") or 0) / 1e9
                )
                op_max.add_metric(key, (stats.get("max_ns") or 0) / 1e9)
        for report in task.get("restore") or []:
            key = [app, tid, str(report.get("store")), str(report.get("source") or "")]
            records, seconds = _num(report.get("records")), _num(report.get("seconds"))
            if records is None:
                continue
            restored.add_metric(key, records)
            if seconds is not None:
                restore_s.add_metric(key, seconds)
                if seconds > 0:
                    restore_rate.add_metric(key, records / seconds)
        stores = ((live.get(tid) or {}).get("restore_progress") or {}).get("stores") or {}
        for store, entry in sorted(stores.items()):
            if _num(entry.get("restored")) is not None:
                progress.add_metric([app, tid, store], float(entry["restored"]))
    yield from (entries, ops, op_max, restored, restore_s, restore_rate, progress)


def _snapshot_metrics(app: str, doc: dict[str, Any], now: float) -> Iterator[Metric]:
    age = GaugeMetricFamily(
        "statekeeper_snapshot_age_seconds",
        "Seconds since the task's newest snapshot (uploaded in this app run, else found in the "
        "storage at start)",
        labels=["app", "task"],
    )
    for tid, task in sorted((doc.get("tasks") or {}).items()):
        uploaded = ((task.get("snapshot") or {}).get("last_uploaded") or {}).get("uploaded_at")
        stored = (task.get("snapshot_stored") or {}).get("created_at_s")
        times = [float(t) for t in (uploaded, stored) if _num(t) is not None]
        if times:
            age.add_metric([app, tid], max(0.0, now - max(times)))
    yield age
    requests = GaugeMetricFamily(
        "statekeeper_snapshot_requests",
        "Snapshot requests the app keeps (the newest), by state",
        labels=["app", "state"],
    )
    counts: dict[str, int] = {s: 0 for s in ("pending", "running", "uploaded", "failed")}
    for request in (doc.get("snapshot_requests") or {}).values():
        state = str(request.get("state"))
        counts[state] = counts.get(state, 0) + 1
    for state, n in sorted(counts.items()):
        requests.add_metric([app, state], float(n))
    yield requests


def _fencing_metrics(app: str, fencing: dict[str, Any]) -> Iterator[Metric]:
    fenced = CounterMetricFamily(
        "statekeeper_fenced_records",
        "Records and markers written under a superseded task epoch (a frozen or cut-off "
        "writer) that readers ignored, by task and kind",
        labels=["app", "task", "kind"],
    )
    for task, kinds in sorted((fencing.get("by_task") or {}).items()):
        for kind, n in sorted(kinds.items()):
            fenced.add_metric([app, task, kind], float(n))
    yield fenced
    dropped = CounterMetricFamily(
        "statekeeper_stale_results_dropped",
        "Task results that arrived under a superseded epoch and were not used",
        labels=["app"],
    )
    dropped.add_metric([app], float(fencing.get("stale_results_dropped") or 0))
    yield dropped


def _placement_metrics(app: str, placement: dict[str, Any]) -> Iterator[Metric]:
    if not placement:
        return
    moves = CounterMetricFamily(
        "statekeeper_task_moves", "Tasks moved to another executor", labels=["app", "reason"]
    )
    for reason, n in sorted((placement.get("moves_by_reason") or {}).items()):
        moves.add_metric([app, reason], float(n))
    yield moves
    restores = CounterMetricFamily(
        "statekeeper_task_restores",
        "Store restores at a task's cold open, by cause and source",
        labels=["app", "cause", "source"],
    )
    for item in placement.get("restores") or []:
        restores.add_metric([app, str(item["cause"]), str(item["source"])], float(item["count"]))
    yield restores
    stale = CounterMetricFamily(
        "statekeeper_stale_copies_closed",
        "Open copies of tasks that had moved away, closed without being reused",
        labels=["app"],
    )
    stale.add_metric([app], float(placement.get("stale_copies_closed") or 0))
    yield stale
    executors = GaugeMetricFamily("statekeeper_executors", "Live executors", labels=["app"])
    executors.add_metric([app], float(len(placement.get("executors") or [])))
    yield executors
    lag = GaugeMetricFamily(
        "statekeeper_standby_lag_records",
        "Changelog records a standby copy is behind the last commit",
        labels=["app", "task", "executor", "store"],
    )
    for task, by_executor in sorted((placement.get("standby_lag") or {}).items()):
        for executor, info in sorted(by_executor.items()):
            for store, records in sorted(((info or {}).get("lag") or {}).items()):
                if (value := _num(records)) is not None:
                    lag.add_metric([app, task, executor, store], value)
    yield lag
