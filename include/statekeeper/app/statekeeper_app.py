"""Runs a topology on PySpark Structured Streaming (rules R1-R5, docs/invariants.md).

Spark plans offset ranges (not rows) through the ``statekeeper_kafka_ranges`` source; in
``foreachBatch`` the driver takes the batch's ranges from Spark's offset log, groups them
into tasks (one per subtopology and partition) and runs them on the executors, one Spark
task per core, where each task reads its ranges from Kafka, processes them against its
stores and commits every ``commit_interval_ms`` (see :mod:`statekeeper.worker.task_runner`).
What each task runs (its ranges, the backlog it replays, whether it must commit) is decided
by the :class:`~statekeeper.app.batch_planner.BatchPlanner`, which keeps the recent
batches' ranges so a task that lost uncommitted batches replays them.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from statekeeper.app.batch_planner import BatchPlanner
from statekeeper.app.batch_sizing import BatchSizing
from statekeeper.app.batch_stats import DEFAULT_WINDOW, BatchStats
from statekeeper.app.epoch_base import next_epoch_base
from statekeeper.app.executor_reports import ExecutorReports
from statekeeper.app.lifecycle import (
    AppState,
    AppStateMachine,
    StateListener,
    settle_idle_start,
)
from statekeeper.app.recorded_start import read_start
from statekeeper.app.snapshot_requests import SnapshotRequests
from statekeeper.app.state_version import check_state_at_start
from statekeeper.app.status import StatusBoard, StatusServer
from statekeeper.app.takeover_start import ShiftedBatchLog, adopt_takeover, record_first_batch
from statekeeper.app.task_totals import TaskTotals
from statekeeper.app.topics import TopicPlan, prepare_topics, source_partitions
from statekeeper.app.worker_memory import WorkerMemory
from statekeeper.cluster.executor import DRIVER_EXECUTOR_ID
from statekeeper.errors import ConfigError, StatekeeperError
from statekeeper.kafka.model import OffsetRange
from statekeeper.placement.driver import ExecutorPlacement, alive_executors, avoid_next_pass
from statekeeper.processing.topology import CarriedInput, task_id
from statekeeper.settings import StatekeeperSettings
from statekeeper.spark.batch_limit import LIMIT_FILE, LIMIT_FILE_OPTION, write_batch_limit
from statekeeper.spark.checkpoint_log import (
    CheckpointBatchLog,
    first_batch_ranges,
    last_committed_offsets,
    logged_batch_ranges,
)
from statekeeper.spark.offset_planning import cap_offsets, offsets_to_json, parse_offset_spec
from statekeeper.state.restore_progress import read_restore_progress
from statekeeper.versions.recorded import state_root
from statekeeper.versions.takeover import Takeover
from statekeeper.worker.task_run import TaskRun, TaskRunResult
from statekeeper.worker.task_runner import (
    ExecutorReport,
    StaleCopyClosed,
    executor_report,
    run_share,
    settings_to_json,
)

log = logging.getLogger("statekeeper.app")

LAG_REFRESH_S = 2.0  # how often the driver re-reads source end offsets for the status
#: Passes over a batch's runs before giving up: a run claimed by a Spark task attempt that
#: failed (and was retried elsewhere) reports nothing and is run again in the next pass.
MAX_BATCH_PASSES = 5
#: Pause before another pass (an executor that was just lost leaves Spark's list meanwhile).
PASS_RETRY_WAIT_S = 0.2
#: How often an idle app with standbys or query servers asks its executors for their reports.
REPORT_REFRESH_S = 5.0
#: A graceful stop waits this long for snapshots still uploading.
SNAPSHOT_STOP_WAIT_S = 60.0


#: Called after every micro-batch with its figures and each partition's position.
BatchListener = Callable[[dict[str, Any], dict[tuple[str, int], int]], None]


class StopRequested(StatekeeperError):
    """Raised inside a batch that began after a stop was requested: Spark keeps the batch
    uncommitted in its checkpoint, so the next start runs it again."""


class StatekeeperApp:
    """A stateful app: a topology, settings, and the Spark query that runs it.

    ``run()`` blocks until the app stops (``stop()``, SIGTERM, or idle when
    ``stop_when_idle``); state transitions go to ``StateListener``s and the status endpoint.
    ``recent_batches`` is how many completed micro-batches ``batches`` and the status
    page's median batch time cover (totals count every batch).

    ``stop_at_offsets`` makes a *bounded run* (``statekeeper backfill``): the source reads
    no source partition past its offset, and ``stop_when_idle`` stops once every source
    partition reached it and every repartition topic is read to its end.
    """

    def __init__(
        self,
        topology: Any,
        settings: StatekeeperSettings,
        *,
        spark_conf: dict[str, str] | None = None,
        listeners: list[StateListener] | None = None,
        recent_batches: int = DEFAULT_WINDOW,
        stop_at_offsets: Mapping[tuple[str, int], int] | None = None,
    ) -> None:
        self.topology = topology
        self.settings = settings
        self._settings_json = settings_to_json(settings)  # what executors rebuild them from
        self.app_id = settings.application_id
        self.spark_conf = dict(spark_conf or {})
        self.machine = AppStateMachine(listeners)
        self.checkpoint = settings.checkpoint_path()
        self.board = StatusBoard(self.app_id, settings.status_path().absolute())
        self.board.add_provider(self._live_status)
        # The error goes in the same status write as ERROR: a reader never sees one alone.
        self.machine.add_listener(
            lambda new, _old: self.board.update(
                state=new.value, **({"error": self.machine.error} if new is AppState.ERROR else {})
            )
        )
        self._server: StatusServer | None = None
        self._batch_lock = threading.Lock()
        self._stop_requested = threading.Event()
        self._stopping = False
        self._plan: TopicPlan | None = None
        self._positions: dict[tuple[str, int], int] = {}
        self._ends: dict[tuple[str, int], int] = {}
        self._end_reader: Any = None  # a LogEndReader, kept: the lag refresh runs every 2 s
        self._stats = BatchStats(recent_batches)
        self._task_totals = TaskTotals()  # commits and store operations, per task
        self._last_batch_end = 0.0
        #: Records the next micro-batch may admit (adaptive batches), handed to the source.
        self._sizing = BatchSizing.from_settings(settings)
        self._worker_memory = WorkerMemory(settings)  # RocksDB's, per worker process
        self._started = time.time()
        self._opened: set[tuple[str, str]] = set()  # (task, executor) opened in this run
        self.placement = ExecutorPlacement(
            settings.application_id,
            settings.num_standby_replicas,
            has_state=lambda sub: bool(topology.store_specs(sub)),
        )
        self.executor_reports = ExecutorReports(
            settings.acceptable_recovery_lag,
            on_endpoint=self.placement.registry.note_endpoint,
            live_executors=self.placement.live_executors,
        )
        self._executors_checked = 0.0
        self._reports_refreshed = 0.0
        self._idle_commit_tried = 0.0
        self.planner = BatchPlanner(
            CheckpointBatchLog(self.checkpoint),
            subtopology_of=self._subtopology_of,
            max_uncommitted_batches=settings.max_uncommitted_batches,
            max_records_per_batch=settings.max_records_per_batch,
        )
        self._query: Any = None
        self._spark_session: Any = None  # for snapshot passes of an idle app
        self._jvm_stop_hook: Any = None  # an InstalledStopHook under spark-submit
        self.snapshots = SnapshotRequests(settings.snapshot_interval_s, self._snapshot_storage)
        self._storage: Any = None
        #: The topology fingerprint (JSON) recorded at start; every snapshot's manifests hold it.
        self._topology_record: str | None = None
        #: Set when this version took over from an older one (statekeeper.app.takeover_start):
        #: Spark batch s is statekeeper batch s + _batch_base.
        self._takeover: Takeover | None = None
        self._batch_base = 0
        self._stop_at = dict(stop_at_offsets) if stop_at_offsets is not None else None
        self._batch_listeners: list[BatchListener] = []
        self._snapshot_before_stop = False
        self._final_snapshot: dict[str, Any] | None = None

    # -- public API --------------------------------------------------------------------------

    @property
    def state(self) -> AppState:
        return self.machine.state

    @property
    def batches(self) -> list[dict[str, Any]]:
        """The last ``recent_batches`` completed micro-batches, oldest first (benchmarks and
        tests read them)."""
        return list(self._stats.recent)

    @property
    def status_url(self) -> str | None:
        return self._server.url if self._server else None

    @property
    def recent_progress(self) -> list[Any]:
        """Spark's ``StreamingQueryProgress`` of this app's query, oldest first (the last
        ``spark.sql.streaming.numRecentProgressUpdates``; kept after the app stops). Read it
        here rather than through a Python ``StreamingQueryListener``: Spark calls such a
        listener over Py4J, which cost the driver JVM ~0.1 s of CPU per progress event
        (measured on a trivial query)."""
        return list(self._query.recentProgress) if self._query is not None else []

    def add_standby_listener(self, listener: Any) -> None:
        """A :class:`~statekeeper.standby.listener.StandbyUpdateListener`: called on the driver
        with the standby events (update start, batch loaded, suspended) executors report."""
        self.executor_reports.add_standby_listener(listener)

    def add_state_listener(self, listener: StateListener) -> None:
        self.machine.add_listener(listener)

    def add_batch_listener(self, listener: BatchListener) -> None:
        """``listener(batch, positions)`` after every micro-batch (on the batch's thread):
        the batch's figures (as in ``batches``) and every partition's position."""
        self._batch_listeners.append(listener)

    @property
    def final_snapshot(self) -> dict[str, Any] | None:
        """The snapshot requested before a ``snapshot_before_stop`` run stopped (as it was
        requested; its progress is in ``snapshots.status()``), else None."""
        return self._final_snapshot

    def request_snapshot(self) -> dict[str, Any]:
        """Ask for a snapshot of every task at the next commit boundary (the next batch, or a
        commit-only pass when the app is idle); returns the request (``request_id``, state).
        Its progress shows under ``snapshot_requests`` in the status document."""
        return self.snapshots.request("api")

    def stop(self) -> None:
        """Ask for a graceful stop: the running batch finishes and commits, then Spark stops."""
        self._stop_requested.set()

    def run(
        self,
        *,
        stop_when_idle: bool = False,
        idle_s: float = 3.0,
        snapshot_before_stop: bool = False,
    ) -> None:
        """Start and block until stopped. With ``stop_when_idle`` the app stops once every
        source partition is fully processed and no batch ran for ``idle_s`` seconds; with
        ``snapshot_before_stop`` too, it then snapshots every stateful task and stops once
        the snapshot is taken (uploads get the graceful stop's wait)."""
        self._snapshot_before_stop = snapshot_before_stop
        self._install_sigterm()
        try:
            self._run(stop_when_idle, idle_s)
        finally:
            if self._jvm_stop_hook is not None:  # a JVM shutdown waiting for this stop goes on
                self._jvm_stop_hook.close()
                self._jvm_stop_hook = None

    def _run(self, stop_when_idle: bool, idle_s: float) -> None:
        try:
            self.machine.transition(AppState.REBALANCING)
            self._start_status()
            self._plan = self._prepare()
            self._take_over()
            # Epochs of this run start above every earlier run's (changelog fencing).
            self.placement.registry.epoch_base = next_epoch_base(self.checkpoint)
            spark = self._spark_session = self._spark()
            self._install_jvm_stop_hook(spark)
            self._replay_lost_batches(spark)
            self._query = query = self._start_query(spark)
            self._supervise(query, stop_when_idle, idle_s)
            self._commit_held_batches(spark)
        except BaseException as exc:
            # ERROR is final for this run, so a supervisor tells a crash from a clean stop.
            if self.state not in (AppState.ERROR, AppState.NOT_RUNNING):
                self.machine.transition(AppState.ERROR, error=f"{type(exc).__name__}: {exc}")
            self.board.update(error=self.machine.error)
            raise
        finally:
            if self._server is not None:
                self._server.stop()
            if self._end_reader is not None:
                self._end_reader.close()
                self._end_reader = None
        self.machine.transition(AppState.NOT_RUNNING)
        self.board.write_file()

    # -- start -------------------------------------------------------------------------------

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_sigterm(signum: int, _frame: Any) -> None:
            log.warning("SIGTERM: finishing the current batch, then stopping")
            self.stop()

        signal.signal(signal.SIGTERM, on_sigterm)

    def _install_jvm_stop_hook(self, spark: Any) -> None:
        """Under spark-submit a SIGTERM reaches the driver JVM, not this process: a JVM
        shutdown hook then stops the app gracefully before Spark's hooks stop the context."""
        from statekeeper.spark.jvm_shutdown import install_graceful_stop_hook

        self._jvm_stop_hook = install_graceful_stop_hook(
            spark, self.stop, self.settings.jvm_shutdown_wait_s
        )

    def _start_status(self) -> None:
        s = self.settings
        if s.status_port is not None:
            from statekeeper.app.metrics_exposition import AppMetrics

            self._server = StatusServer(
                self.board,
                s.status_host,
                s.status_port,
                actions={"/snapshot": self._post_snapshot},
                metrics=AppMetrics(self.board.snapshot).render,
            ).start()
            log.info("status endpoint %s", self._server.url)
            # Off the start path: listing the storage may take a while (S3).
            threading.Thread(
                target=self._note_stored_snapshots, name="statekeeper-stored-snapshots", daemon=True
            ).start()
        self.board.update(
            state=self.state.value,
            status_url=self.status_url,
            processing_guarantee=s.processing_guarantee,
            checkpoint=str(self.checkpoint),
        )

    def _prepare(self) -> TopicPlan:
        from statekeeper.kafka.adapter import detect_profile
        from statekeeper.kafka.admin import make_admin, wait_for_broker

        s = self.settings
        wait_for_broker(s.bootstrap_servers, s.broker_timeout_s)
        admin = make_admin(s.bootstrap_servers)
        profile = detect_profile(admin, s.broker_flavor, s.broker_timeout_s)
        if s.processing_guarantee == "exactly_once":
            # State is exact either way (commit markers). Outputs are effectively-once: a
            # re-run batch re-emits identical records with identical sk.* dedupe ids.
            # Transactional outputs are not implemented yet, even where the broker's
            # transactions are reliable; say so rather than imply more.
            log.log(
                logging.WARNING if profile.transactions_reliable else logging.INFO,
                "exactly_once on %s: state is exact; outputs are deduplicated by their sk.* "
                "headers (transactional output is not used)",
                profile.name,
            )
        sources = source_partitions(admin, self.topology, self.app_id, s.broker_timeout_s)
        # Before any topic is created or record processed: refuse state this topology
        # cannot read as it is (statekeeper.versions); the fingerprint goes into snapshots.
        fingerprint = check_state_at_start(s, self.topology, sources)
        self._topology_record = fingerprint.to_json()
        plan = prepare_topics(admin, self.topology, self.app_id, s.broker_timeout_s, sources)
        self._init_positions(plan)
        self.board.update(
            broker=profile.name,
            topology=self.topology.describe(),
            tasks={task_id(sub, p): {} for sub, p in plan.tasks},
        )
        return plan

    def _take_over(self) -> None:
        """On state a migration wrote for this version: continue the old version's batch
        numbering, start where it stopped, and read its unconsumed repartition records once."""
        takeover = adopt_takeover(self.checkpoint, state_root(self.settings.state_dir, self.app_id))
        if takeover is None:
            return
        self._takeover, self._batch_base = takeover, takeover.batch_base
        self.topology.carried_inputs = {
            c.old_topic: CarriedInput(c.new_topic, c.max_batch, c.fan_out) for c in takeover.carried
        }
        s = self.settings
        self.planner = BatchPlanner(
            ShiftedBatchLog(CheckpointBatchLog(self.checkpoint), self.checkpoint, self._batch_base),
            subtopology_of=self._subtopology_of,
            max_uncommitted_batches=s.max_uncommitted_batches,
            max_records_per_batch=s.max_records_per_batch,
            floor=takeover.floor,
            first_replayable=takeover.batch_base,
            fan_out=takeover.fan_out,
        )
        self.board.update(
            takeover={
                "from": takeover.from_application_id,
                "batch_base": takeover.batch_base,
                "carried_ranges": len(takeover.carried_ranges()),
            }
        )

    def _init_positions(self, plan: TopicPlan) -> None:
        """Where each source partition stands: Spark's last committed batch, else its start."""
        committed = last_committed_offsets(self.checkpoint) or {}
        for topic, count in plan.partitions.items():
            for p in range(count):
                offset = committed.get(topic, {}).get(str(p))
                if offset is not None:
                    self._positions[(topic, p)] = int(offset)

    def _spark(self) -> Any:
        """The app's SparkSession. Its master: spark-submit's when spark-submit launched this
        process, else ``settings.spark_master`` (see :mod:`statekeeper.spark.master`)."""
        import os

        from pyspark import SparkContext
        from pyspark.conf import SparkConf
        from pyspark.sql import SparkSession

        from statekeeper.spark.master import executor_python_conf, master_to_set
        from statekeeper.spark.session_env import (
            LOCAL_CHECKPOINT_CONF,
            failover_conf,
            prepare_spark_env,
            quiet_spark_logs,
        )

        env_conf = prepare_spark_env()
        # Decided before the JVM starts: afterwards its conf always holds a spark.master.
        master = master_to_set(
            self.settings.spark_master,
            context_active=SparkContext._active_spark_context is not None,
        )
        if master is None and "spark_master" in self.settings.model_fields_set:
            log.warning(
                "spark_master=%s is not used: spark-submit, PYSPARK_SUBMIT_ARGS or the "
                "running SparkContext chose the master (statekeeper.spark.master)",
                self.settings.spark_master,
            )
        SparkContext._ensure_initialized()  # so SparkConf sees spark-submit's conf
        builder = SparkSession.builder
        existing = SparkConf()
        if master is not None:  # this process launched the JVM: "pyspark-shell" is its name
            builder = builder.master(master).appName(f"statekeeper-{self.app_id}")
        effective_master = self.spark_conf.get(
            "spark.master", master or existing.get("spark.master", "")
        )
        defaults = {
            **executor_python_conf(effective_master, os.environ["PYSPARK_PYTHON"]),
            # A frozen host's tasks move in ~20 s, not 2-3 min (docs/runtime.md).
            **failover_conf(effective_master),
            **env_conf,
            **LOCAL_CHECKPOINT_CONF,  # the checkpoint is always a local directory here
            "spark.app.name": f"statekeeper-{self.app_id}",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": str(max(self._plan.partitions.values(), default=4)),
            "spark.python.worker.reuse": "true",
            "spark.sql.streaming.stopTimeout": "60s",
        }
        for key, value in {**defaults, **self.spark_conf}.items():
            if key in self.spark_conf or not existing.contains(key):
                builder = builder.config(key, value)
        own_session = SparkSession.getActiveSession() is None
        spark = builder.getOrCreate()
        if own_session:  # a caller's session keeps the log levels it chose
            quiet_spark_logs(spark)
        from statekeeper.spark.kafka_source import register_sources

        register_sources(spark)
        return spark

    def _start_query(self, spark: Any) -> Any:
        s = self.settings
        retained = int(spark.conf.get("spark.sql.streaming.minBatchesToRetain", "100"))
        if retained <= s.max_uncommitted_batches:
            # A restarted driver reads the batches tasks may still have to replay from there.
            raise ConfigError(
                f"max_uncommitted_batches ({s.max_uncommitted_batches}) must be below Spark's "
                f"spark.sql.streaming.minBatchesToRetain ({retained})"
            )
        topics = sorted(self._plan.partitions)  # type: ignore[union-attr]
        self.checkpoint.mkdir(parents=True, exist_ok=True)
        starting = self._starting_offsets()
        reader = (
            spark.readStream.format("statekeeper_kafka_ranges")
            .option("kafka.bootstrap.servers", s.bootstrap_servers)
            .option("subscribe", ",".join(topics))
            .option("startingOffsets", starting)
            .option("maxRecordsPerBatch", str(s.max_records_per_batch))
        )
        if s.adaptive_batches:
            limit_file = self.checkpoint / LIMIT_FILE
            write_batch_limit(limit_file, self._sizing.limit)
            reader = reader.option(LIMIT_FILE_OPTION, str(limit_file))
            self.board.update(batch_sizing=self._sizing.report())
        if self._stop_at is not None:
            reader = reader.option("stopAtOffsets", offsets_to_json(self._stop_at))
        if self._stop_at is not None or self._takeover is not None:
            self._seed_positions(starting)
        ranges = reader.load()
        return (
            ranges.writeStream.queryName(self.app_id)
            .foreachBatch(self._on_batch)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(processingTime=f"{s.trigger_interval_ms} milliseconds")
            .start()
        )

    def _starting_offsets(self) -> str:
        """Where the query starts when its checkpoint has no batch yet (and where Spark's
        batch 0 starts when it runs again): the takeover's offsets, else those a backfill
        recorded (statekeeper.app.recorded_start), else ``starting_offsets``."""
        if self._takeover is not None:
            return self._takeover.starting_offsets_json()
        recorded = read_start(self.checkpoint)
        if recorded is not None:
            return recorded.starting_offsets_json()
        return self.settings.starting_offsets

    def _seed_positions(self, starting: str) -> None:
        """Where a partition without a committed position stands when the start is explicit
        (a bounded run, a takeover): a partition with nothing to read (below its stop
        offset; drained by the old version) never appears in a batch, and must not look
        unprocessed, its whole log as lag."""
        spec = parse_offset_spec(starting, "startingOffsets", "earliest")
        for tp, offset in spec.offsets.items():
            if offset >= 0:
                self._positions.setdefault(tp, offset)

    # -- supervise ---------------------------------------------------------------------------

    def _supervise(self, query: Any, stop_when_idle: bool, idle_s: float) -> None:
        refreshed = 0.0
        while not query.awaitTermination(0.25):
            if time.monotonic() - refreshed > LAG_REFRESH_S:
                # Off the batch path: end offsets for the status page's source lag.
                self._refresh_ends()
                refreshed = time.monotonic()
                if self.state is AppState.REBALANCING and not self._batch_lock.locked():
                    # A start with nothing to process runs no micro-batch until input comes:
                    # caught up, it is RUNNING now, not REBALANCING until then.
                    settle_idle_start(self.machine, query_started=True, caught_up=self._caught_up())
                self.snapshots.confirm_uploads()
                self._publish_snapshots()
                self.board.write_file()
            self.snapshots.schedule(self._last_batch_end)
            if self.snapshots.pending:
                self._snapshot_idle_tasks()
            self._commit_idle_tasks()
            self._follow_executors()
            self._refresh_executor_reports()
            if stop_when_idle and not self.snapshots.pending and self._idle(idle_s):
                if self._snapshot_before_stop and self._final_snapshot is None:
                    log.info("all input processed; a snapshot of every task, then stopping")
                    self._final_snapshot = self.request_snapshot()
                    self._publish_snapshots()
                else:
                    log.info("all input processed; stopping")
                    self.stop()
            if self._stop_requested.is_set():
                self._graceful_stop(query)
                break
        error = query.exception()
        if error is not None and not self._stopping:
            raise StatekeeperError(f"streaming query failed: {error}")

    def _graceful_stop(self, query: Any) -> None:
        if self.state is not AppState.ERROR:
            self.machine.transition(AppState.PENDING_SHUTDOWN)
        self._await_snapshots(SNAPSHOT_STOP_WAIT_S)
        with self._batch_lock:  # waits for the running batch to commit
            self._stopping = True
        query.stop()

    def _await_snapshots(self, timeout_s: float) -> None:
        """Before stopping: give snapshots being uploaded up to ``timeout_s`` to finish (a
        stopped app's workers go, and an unfinished upload leaves no snapshot)."""
        deadline = time.monotonic() + timeout_s
        while self.snapshots.running and time.monotonic() < deadline:
            time.sleep(0.2)
            self.snapshots.confirm_uploads()
        self._publish_snapshots()
        if self.snapshots.running:
            log.warning("stopping with snapshot uploads unfinished after %.0fs", timeout_s)

    def _idle(self, idle_s: float) -> bool:
        if time.monotonic() - self._last_batch_end < idle_s or self._batch_lock.locked():
            return False
        self._refresh_ends()
        return self._caught_up()

    def _caught_up(self) -> bool:
        """Every source partition processed to the end offsets last read (a bounded run's
        are capped at its stop offsets)."""
        return bool(self._ends) and all(
            self._positions.get(tp, 0) >= end for tp, end in self._ends.items()
        )

    def _refresh_ends(self) -> None:
        from statekeeper.kafka.adapter import consumer_config
        from statekeeper.kafka.offsets import LogEndReader

        if self._end_reader is None:  # one consumer for every refresh, not one per refresh
            conf = consumer_config(self.settings.bootstrap_servers, group_id=f"{self.app_id}-lag")
            self._end_reader = LogEndReader(conf, self.settings.broker_timeout_s)
        tps = [(t, p) for t, n in self._plan.partitions.items() for p in range(n)]  # type: ignore[union-attr]
        self._ends = cap_offsets(self._end_reader.read(tps), self._stop_at)

    # -- one micro-batch (driver side) --------------------------------------------------------

    def _on_batch(self, ranges_df: Any, spark_batch_id: int) -> None:
        batch_id = spark_batch_id + self._batch_base
        with self._batch_lock:
            if self._stopping:
                raise StopRequested(f"stop requested; batch {batch_id} runs again on restart")
            started = time.perf_counter()
            if self.state is AppState.REBALANCING:
                self.machine.transition(AppState.RESTORING)
            ranges = self._batch_ranges(ranges_df, spark_batch_id)
            if self._takeover is not None and spark_batch_id == 0:
                ranges = record_first_batch(
                    self.checkpoint, ranges + self._takeover.carried_ranges()
                )
            spark = ranges_df.sparkSession
            self._process_batch(batch_id, ranges, lambda runs: self._execute(spark, runs), started)

    def _process_batch(
        self,
        batch_id: int,
        ranges: list[OffsetRange],
        execute: Callable[[list[TaskRun]], list[TaskRunResult]],
        started: float,
    ) -> None:
        """Plan, run (``execute``) and record one batch; Spark-free given ``execute``. The
        batch's entry in the status gets the driver's time per phase (``driver_s``: ranges
        read until planning, planning, the Spark job with the tasks, recording)."""
        limit = self._sizing.limit  # what the source planned this batch under
        t_plan = time.perf_counter()
        runs = self._with_snapshot(batch_id, self.planner.plan_batch(batch_id, ranges, limit))
        t_execute = time.perf_counter()
        results = execute(runs)
        t_record = time.perf_counter()
        seconds = t_record - started
        admitted = sum(r.count for r in ranges)
        self._size_next_batch(admitted, results, seconds)
        phases = {
            "ranges": t_plan - started,
            "plan": t_execute - t_plan,
            "execute": t_record - t_execute,
        }
        self._record(
            batch_id,
            runs,
            results,
            seconds,
            admitted=admitted,
            limit=limit,
            phases=phases,
            record_started=t_record,
        )
        if self.state is AppState.RESTORING:
            self.machine.transition(AppState.RUNNING)

    def _size_next_batch(self, admitted: int, results: list[TaskRunResult], seconds: float) -> None:
        """Choose the next batch's record limit from this one (statekeeper.app.batch_sizing)
        and hand it to the source before Spark plans that batch."""
        sampled = [r.record_bytes_sampled for r in results if r.record_bytes_sampled is not None]
        before = self._sizing.limit
        limit = self._sizing.after_batch(
            admitted, seconds, sum(sampled) / len(sampled) if sampled else None
        )
        if self.settings.adaptive_batches and limit != before:
            write_batch_limit(self.checkpoint / LIMIT_FILE, limit)
        self.board.update(batch_sizing=self._sizing.report())

    def _batch_ranges(self, ranges_df: Any, batch_id: int) -> list[OffsetRange]:
        """The batch's offset ranges: from Spark's offset log when it holds both ends, or
        batch 0's end and an explicit start (no Spark job needed), else by running the
        ranges source over the batch."""
        logged = logged_batch_ranges(self.checkpoint, batch_id)
        if logged is None and batch_id == 0:  # a start the query was told: no Spark job
            told = parse_offset_spec(self._starting_offsets(), "startingOffsets", "earliest")
            logged = first_batch_ranges(self.checkpoint, told.offsets)
        if logged is not None:
            return logged
        return [
            OffsetRange(row.topic, row.partition, row.start_offset, row.end_offset)
            for row in ranges_df.collect()
        ]

    def _subtopology_of(self, topic: str) -> int:
        if self._takeover is not None:
            topic = self._takeover.alias(topic)
        return self.topology.subtopology_of(self.app_id, topic)

    def _replay_lost_batches(self, spark: Any) -> None:
        """At start, before the query: a killed app's workers took the batches its tasks held
        uncommitted with them, and Spark will not run those batches again. Every task with
        input in the last batches replays and commits them now, not when (or if) its
        partitions next get input."""
        if self.planner.seed_from_commit_log():
            self._commit_held_batches(spark)

    def _commit_held_batches(self, spark: Any) -> None:
        """A stop ends with every task committed: tasks that still hold uncommitted batches
        (a commit interval spans batches) commit them now, in the worker holding them, or in
        another one that replays them."""
        if self.state is AppState.ERROR:
            return
        runs = self.planner.runs_to_commit_held()
        if not runs:
            return
        started = time.perf_counter()
        results = self._execute(spark, runs)
        self._note_committed(results)
        log.info(
            "%d task(s) committed the batches they held or had lost in %.2fs",
            len(results),
            time.perf_counter() - started,
        )

    def _note_committed(self, results: list[TaskRunResult]) -> None:
        self.planner.note_results(results)
        events = [event for result in results for event in result.snapshots]
        if events:
            self.snapshots.note_events(events)
            self._publish_snapshots()
        for result in results:
            self._task_totals.add(result)
            opened_at = (result.task_id, result.executor_id)
            if opened_at not in self._opened and not result.warm:
                # The first open of a task in this run on each executor is the restore that
                # matters (later opens there replay only the previous batch's markers). It may
                # be the commit-only run that replays lost batches before the query starts.
                self._opened.add(opened_at)
                self.board.update_task(result.task_id, restore=result.restored)
            self.board.update_task(
                result.task_id,
                committed_batch_id=result.committed_batch_id,
                committed_offsets=result.committed_offsets,
                **self._task_totals.task(result.task_id),
            )

    def _execute(self, spark: Any, runs: list[TaskRun]) -> list[TaskRunResult]:
        """Run ``runs`` on the executors: each placed where its state is
        (:mod:`statekeeper.placement`); runs that no Spark task took (their
        executor got no Spark task, or was lost) go again in another pass, moved away from
        that executor from the third pass on, or at once when it is gone."""
        if not runs:
            return []
        topology, settings_json = self.topology, self._settings_json
        sc = spark.sparkContext
        results: list[TaskRunResult] = []
        todo = runs
        avoid: dict[str, str] = {}
        for attempt in range(MAX_BATCH_PASSES):
            alive = alive_executors(sc)
            placed, assignment = self.placement.place(
                todo, alive, avoid, self.executor_reports.caught_up_standbys()
            )
            shares = self.placement.shares(placed, alive, sc.defaultParallelism)
            # On a cluster every core gets a Spark task, so every executor gets some: a
            # Spark task runs only runs placed on the executor it landed on.
            slices = len(shares) if alive == [DRIVER_EXECUTOR_ID] else sc.defaultParallelism
            slices = max(slices, len(shares), 1)
            job = uuid.uuid4().hex  # one pass over the batch's runs; claims are per pass
            placement_json = assignment.to_json()
            out = (
                sc.parallelize(range(slices), slices)
                .flatMap(
                    lambda index, s=shares, j=job, a=placement_json: run_share(
                        index, s, j, topology, settings_json, a
                    )
                )
                .collect()
            )
            reports = self.executor_reports
            reports.note_reports([o for o in out if isinstance(o, ExecutorReport)])
            reports.note_stale([o for o in out if isinstance(o, StaleCopyClosed)])
            ran_now = self.placement.current_results(
                [o for o in out if isinstance(o, TaskRunResult)]
            )
            reports.note_results(ran_now)
            results += ran_now
            ran = Counter(result.task_id for result in results)
            if any(n > 1 for n in ran.values()):
                raise StatekeeperError(
                    f"batch {runs[0].batch_id}: a task ran twice ({dict(ran)}); not committed"
                )
            # A task claimed by a worker that then failed, or placed on an executor that got
            # no Spark task, reports nothing: run it again.
            todo = [r for r in runs if r.task_id not in ran]
            if not todo:
                return results
            avoid.update(avoid_next_pass(placed, ran, set(alive_executors(sc)), attempt))
            log.warning(
                "batch %d pass %d: %d task(s) did not run (%s); running them again",
                runs[0].batch_id,
                attempt + 1,
                len(todo),
                ", ".join(f"{r.task_id}@{r.executor}" for r in placed if r.task_id not in ran),
            )
            time.sleep(PASS_RETRY_WAIT_S)
        raise StatekeeperError(
            f"batch {runs[0].batch_id}: tasks {[r.task_id for r in todo]} did not run after "
            f"{MAX_BATCH_PASSES} passes; the batch is not committed and runs again"
        )

    def _record(
        self,
        batch_id: int,
        runs: list[TaskRun],
        results: list[TaskRunResult],
        seconds: float,
        *,
        admitted: int | None = None,
        limit: int | None = None,
        phases: dict[str, float] | None = None,
        record_started: float | None = None,
    ) -> None:
        for run in runs:
            for r in run.ranges:
                tp = (r.topic, r.partition)
                self._positions[tp] = max(self._positions.get(tp, 0), r.end)
        for result in results:
            self.board.update_task(
                result.task_id,
                worker_pid=result.worker_pid,
                executor=result.executor_id,
                warm=result.warm,
                last_batch_id=result.batch_id,
                store_entries_approx=result.store_entries_approx,
                seconds=result.seconds,
            )
        self._note_committed(results)
        if self._worker_memory.note(results):
            self.board.update(rocksdb_memory=self._worker_memory.report())
        last = self._stats.record(batch_id, runs, results, seconds)
        # Source records (all subscribed topics) the batch admitted, and under what limit.
        last.update(records_admitted=admitted, records_limit=limit)
        if phases is not None:
            if record_started is not None:
                phases["record"] = time.perf_counter() - record_started
            last["driver_s"] = {name: round(s, 4) for name, s in phases.items()}
        self._last_batch_end = time.monotonic()
        self.board.update(last_batch=last, totals=dict(self._stats.totals))
        records = last["records"]
        log.info("batch %d: %d tasks, %d records in %.2fs", batch_id, len(runs), records, seconds)
        for listener in self._batch_listeners:
            try:
                listener(dict(last), dict(self._positions))
            except Exception:  # a listener's bug must not fail the batch
                log.exception("batch listener %r failed", listener)

    # -- snapshots (statekeeper.app.snapshot_requests) -----------------------------------------

    def _snapshot_storage(self) -> Any:
        from statekeeper.snapshots.storage import storage_for

        if self._storage is None:
            self._storage = storage_for(self.settings, create=True)
        return self._storage

    def _post_snapshot(self, _body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """``POST /snapshot``: 202 with the request, or 409 when the app does not run."""
        if self.state not in (AppState.REBALANCING, AppState.RESTORING, AppState.RUNNING):
            return 409, {"error": f"app {self.app_id} is {self.state.value}; no snapshot"}
        request = self.snapshots.request("endpoint")
        self._publish_snapshots()
        return 202, {**request, "status_url": self.status_url}

    def _stateful_tasks(self) -> list[tuple[str, int, int]]:
        if self._plan is None:
            return []
        return [
            (task_id(sub, p), sub, p)
            for sub, p in self._plan.tasks
            if self.topology.store_specs(sub)
        ]

    def _with_snapshot(self, batch_id: int, runs: list[TaskRun]) -> list[TaskRun]:
        """When a snapshot is pending, this batch takes it: every stateful task's run carries
        the request (tasks without input join as commit-only runs) and commits now."""
        if not self.snapshots.pending:
            return runs
        tasks = self._stateful_tasks()
        stateful = {tid for tid, _, _ in tasks}
        have = {run.task_id for run in runs}
        extra = self.planner.commit_only_runs(
            [t for t in tasks if t[0] not in have], batch_id=batch_id
        )
        request = self.snapshots.take(batch_id, stateful)
        if request is None:
            return runs
        return [
            dataclasses.replace(
                run, snapshot_request=request, snapshot_topology=self._topology_record
            )
            if run.task_id in stateful
            else run
            for run in [*runs, *extra]
        ]

    def _quiet_s(self) -> float:
        """How long without a batch makes the app idle: two trigger intervals, at least 1 s."""
        return max(1.0, 2 * self.settings.trigger_interval_ms / 1000)

    def _idle_lock(self, quiet_s: float) -> bool:
        """Take the batch lock for a pass of the driver's own (no batch runs, none ran for
        ``quiet_s``, the app is not stopping); the caller releases it. False: not taken."""
        if (
            self._spark_session is None
            or self._stopping
            or time.monotonic() - self._last_batch_end < quiet_s
        ):
            return False
        return self._batch_lock.acquire(blocking=False)

    def _snapshot_idle_tasks(self) -> None:
        """A pending snapshot while no batch runs (an idle app): a commit-only pass of every
        stateful task takes it. A running batch takes it instead (the lock is busy)."""
        if not self._idle_lock(self._quiet_s()):  # a batch will take it
            return
        spark = self._spark_session
        try:
            if self._stopping or not self.snapshots.pending:
                return
            runs = self.planner.commit_only_runs(self._stateful_tasks())
            if not runs:
                self.snapshots.take(None, [])  # nothing has run: nothing to snapshot
                self._publish_snapshots()
                return
            request = self.snapshots.take(runs[0].batch_id, [r.task_id for r in runs])
            runs = [
                dataclasses.replace(
                    r, snapshot_request=request, snapshot_topology=self._topology_record
                )
                for r in runs
            ]
            try:
                results = self._execute(spark, runs)
            except Exception as exc:  # the snapshot fails, the app goes on
                log.exception("snapshot %s: the commit-only pass failed", request)
                self.snapshots.fail(str(request), f"{type(exc).__name__}: {exc}")
                self._publish_snapshots()
                return
            self._note_committed(results)
            log.info("snapshot %s: commit-only pass over %d task(s)", request, len(runs))
        finally:
            self._batch_lock.release()

    def _commit_idle_tasks(self) -> None:
        """An idle app commits what its tasks hold once ``commit_interval_ms`` has passed
        since its last batch (Kafka Streams commits on its interval whatever the input):
        readers of the last commit (queries, snapshots, drills, a shadow run's diff) then
        see every batch, not the commit before an input pause. Nothing held: no Spark job."""
        quiet_s = max(self._quiet_s(), self.settings.commit_interval_ms / 1000)
        now = time.monotonic()
        if now - self._idle_commit_tried < quiet_s or not self._idle_lock(quiet_s):
            return
        try:
            self._idle_commit_tried = now
            runs = [] if self._stopping else self.planner.runs_to_commit_held()
            if not runs:
                return
            try:
                results = self._execute(self._spark_session, runs)
            except Exception:  # the next batch or stop commits them instead
                log.exception("idle commit of %d task(s) failed", len(runs))
                return
            self._note_committed(results)
            log.info("idle: %d task(s) committed the batches they held", len(results))
        finally:
            self._batch_lock.release()

    def _follow_executors(self) -> None:
        """An idle app follows executors lost or added at once (a busy one does in its next
        batch): a commit-only pass of every stateful task places the lost executor's tasks
        elsewhere, where they restore (from a standby copy when there is one), and hands the
        new assignment to every executor, so a new one starts its standbys."""
        spark = self._spark_session
        last = self.placement.registry.last
        now = time.monotonic()
        if spark is None or last is None or self._stopping or now - self._executors_checked < 1:
            return
        self._executors_checked = now
        alive = alive_executors(spark.sparkContext)
        quiet_s = max(1.0, 2 * self.settings.trigger_interval_ms / 1000)
        if (
            set(alive) == set(last.executors)
            or now - self._last_batch_end < quiet_s  # the next batch follows them
            or not self._batch_lock.acquire(blocking=False)
        ):
            return
        try:
            runs = self.planner.commit_only_runs(self._stateful_tasks())
            if runs and not self._stopping:
                results = self._execute(spark, runs)
                self._note_committed(results)
                log.info(
                    "executors %s -> %s: commit-only pass over %d task(s)",
                    sorted(last.executors),
                    alive,
                    len(runs),
                )
        except Exception:  # the next batch tries again
            log.exception("following the executors (%s) failed", alive)
        finally:
            self._batch_lock.release()

    def _refresh_executor_reports(self) -> None:
        """Executors report with each batch's results; an idle app with standbys or query
        servers asks them every few seconds with a job that runs no stream task, so the
        status shows current standby lag and events."""
        s = self.settings
        spark = self._spark_session
        last = self.placement.registry.last
        now = time.monotonic()
        if (
            (s.num_standby_replicas <= 0 and s.query_port is None)
            or spark is None
            or last is None
            or self._stopping
            or now - self._reports_refreshed < REPORT_REFRESH_S
            or now - self._last_batch_end < REPORT_REFRESH_S
        ):
            return
        self._reports_refreshed = now
        if not self._batch_lock.acquire(blocking=False):
            return
        try:
            sc = spark.sparkContext
            topology, settings_json, placed = self.topology, self._settings_json, last.to_json()
            slices = max(1, sc.defaultParallelism)
            reports = (
                sc.parallelize(range(slices), slices)
                .flatMap(lambda i: executor_report(i, topology, settings_json, placed))
                .collect()
            )
            self.executor_reports.note_reports(reports)
        except Exception:  # the next batch reports anyway
            log.exception("asking the executors for their reports failed")
        finally:
            self._batch_lock.release()

    def _publish_snapshots(self) -> None:
        for tid, snapshot in self.snapshots.task_status().items():
            self.board.update_task(tid, snapshot=snapshot)
        self.board.update(snapshot_requests=self.snapshots.status())

    # -- status --------------------------------------------------------------------------------

    def _note_stored_snapshots(self) -> None:
        """Each task's newest snapshot in the storage from earlier runs
        (``tasks.<id>.snapshot_stored``): the snapshot age before this run uploads one."""
        from statekeeper.app.stored_snapshots import newest_stored_snapshots

        for tid, newest in newest_stored_snapshots(self.settings).items():
            self.board.update_task(tid, snapshot_stored=newest)

    def _live_status(self) -> dict[str, Any]:
        """Values computed when the status is read: lag, restore progress, throughput."""
        out: dict[str, Any] = {"state": self.state.value}
        out["throughput"] = self._stats.throughput()
        if self._plan is None:
            return out
        lag: dict[str, int] = defaultdict(int)
        partitions = []
        for (topic, p), end in sorted(self._ends.items()):
            tid = task_id(self._subtopology_of(topic), p)
            position = self._positions.get((topic, p), 0)
            lag[tid] += max(0, end - position)
            partitions.append(
                {"topic": topic, "partition": p, "task": tid, "position": position, "end": end}
            )
        out["source_partitions"] = partitions  # lag = end - position, per source partition
        tasks: dict[str, Any] = {}
        state_root = Path(self.settings.state_dir) / self.app_id
        for sub, p in self._plan.tasks:
            tid = task_id(sub, p)
            tasks[tid] = {
                "source_lag": lag.get(tid) if self._ends else None,
                "restore_progress": read_restore_progress(state_root / tid),
            }
        out["task_live"] = tasks
        out["placement"] = {**self.placement.status(), **self.executor_reports.status()}
        out["fencing"] = {
            **self.executor_reports.fencing_status(),
            "stale_results_dropped": self.placement.stale_results,
            "epoch_base": self.placement.registry.epoch_base,
        }
        return out
