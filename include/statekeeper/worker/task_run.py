"""What the driver sends a stream task for one micro-batch and what the task reports back.

Plain picklable dataclasses (no Spark, no Kafka client): the driver's
:class:`~statekeeper.app.batch_planner.BatchPlanner` builds :class:`TaskRun`s, the
executors run them (:mod:`statekeeper.worker.task_runner`) and return
:class:`TaskRunResult`s.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from statekeeper.kafka.model import OffsetRange


@dataclass(frozen=True)
class BatchSlice:
    """A task's part of one earlier micro-batch: its id, Spark's logged time and the task's
    offset ranges."""

    batch_id: int
    batch_time_ms: int
    ranges: tuple[OffsetRange, ...]


@dataclass(frozen=True)
class TaskRun:
    """One task's work in one micro-batch (picklable; built on the driver).

    ``backlog`` holds the task's earlier batches that Spark may have committed while the
    task had not (a commit interval spans batches): a task whose state is behind replays
    them one by one before this batch. ``force_commit`` commits now, whatever the interval
    (the source is caught up, or the app is stopping). ``snapshot_request`` (a request id)
    commits now too and snapshots the task's stores right after that commit."""

    task_id: str
    subtopology: int
    partition: int
    ranges: tuple[OffsetRange, ...]
    batch_id: int
    batch_time_ms: int
    backlog: tuple[BatchSlice, ...] = ()
    force_commit: bool = False
    snapshot_request: str | None = None
    #: With ``snapshot_request``: the app's topology fingerprint (JSON) the manifests record.
    snapshot_topology: str | None = None
    # Where the driver placed the task (Spark's executor id) and the task's placement epoch:
    # only that executor runs it, and a copy of it open elsewhere, or under an older epoch,
    # is stale (statekeeper.placement.registry).
    executor: str | None = None
    epoch: int = 0
    #: The driver's wall clock when it placed the run: the task's epoch was current then
    #: (a task that resumes long after, from a freeze, checks before it writes markers).
    planned_at: float = 0.0


@dataclass
class TaskRunResult:
    """What a task reports back to the driver."""

    task_id: str
    batch_id: int
    committed: bool  # the state's commit covers this batch
    committed_batch_id: int | None = None  # the last batch the task's state committed
    warm: bool = False  # the state was still open in this worker from the task's last batch
    worker_pid: int = 0  # the Python worker process that ran it
    executor_id: str = ""  # the Spark executor that ran it
    # Why a copy of the task left open in this worker was not reused (it was stale), or None.
    stale_copy: str | None = None
    records_read: int = 0
    records_processed: int = 0
    records_skipped: int = 0
    records_late_dropped: int = 0
    records_dlq: int = 0
    records_output: int = 0
    records_replayed: int = 0  # of backlog batches the state had not committed
    # Mean key + value bytes of a sample of the records read (adaptive batch sizes), or None.
    record_bytes_sampled: float | None = None
    # RocksDB's bound and usage in the worker process that ran it (stores.rocksdb_memory).
    rocksdb_memory: dict[str, Any] | None = None
    committed_offsets: dict[str, int] = field(default_factory=dict)
    restored: list[dict[str, Any]] = field(default_factory=list)
    # RocksDB's estimate (estimate-num-keys): tombstones and overwrites not yet compacted away
    # count too, so it can be well above the real key count.
    store_entries_approx: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    # This run committed the task's state (``seconds["commit"]`` is then its commit time).
    commit_ran: bool = False
    epoch: int = 0  # the epoch the task ran under (the driver drops results of stale ones)
    #: What fencing dropped while this run read: "changelog records", "changelog markers",
    #: "repartition records" -> count (changelog.fencing).
    fenced: dict[str, int] = field(default_factory=dict)
    # The metered stores' operations since the task's last report, per store and operation:
    # count, total_ns, max_ns (statekeeper.stores.metrics.StoreMetrics.drain).
    store_operations: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    # Snapshot events of this worker process (statekeeper.worker.snapshot_uploader): this
    # task's staging, and uploads that finished since the worker's last report, of any task.
    snapshots: list[dict[str, Any]] = field(default_factory=list)
    # The executor's services report (standby lag, query port), on one result per Spark task.
    executor_report: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
