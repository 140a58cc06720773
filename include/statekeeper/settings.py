"""One typed settings object for the whole process, overridable by STATEKEEPER_* env vars."""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from statekeeper.errors import ConfigError


class StatekeeperSettings(BaseSettings):
    """Process-wide configuration. Every field can be set as env var ``STATEKEEPER_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="STATEKEEPER_", extra="forbid")

    bootstrap_servers: str = Field(
        "127.0.0.1:9092", description="Kafka bootstrap servers (host:port[,host:port])"
    )
    broker_flavor: Literal["auto", "kafka", "tansu"] = Field(
        "auto", description="Which broker semantics to assume; auto detects the embedded broker"
    )
    state_dir: Path = Field(Path("var/state"), description="Root of local state directories")
    application_id: str = Field("statekeeper-app", pattern=r"^[A-Za-z0-9._-]+$")
    lock_timeout_s: float = Field(30.0, ge=0, description="How long to wait for a task lock")
    restore_threads: int = Field(
        1,
        ge=1,
        le=64,
        description="Threads restoring a task's changelog partitions, each reading its share "
        "through one consumer (librdkafka fetches them in parallel either way; more threads "
        "contend for the GIL)",
    )
    restore_batch_records: int = Field(
        50_000, ge=1, description="Records per RocksDB WriteBatch while restoring"
    )
    block_cache_bytes: int = Field(
        128 * 1024 * 1024,
        ge=1024 * 1024,
        description="RocksDB's memory bound per process (a Spark Python worker): one block "
        "cache shared by all its stores, their memtables charged to it "
        "(statekeeper.stores.rocksdb_memory)",
    )
    write_buffer_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1024 * 1024,
        description="The memtables' share of block_cache_bytes, all stores of a process "
        "together: past it RocksDB flushes the largest",
    )
    broker_timeout_s: float = Field(
        15.0, gt=0, description="How long to wait for the broker before failing"
    )
    processing_guarantee: Literal["at_least_once", "exactly_once"] = Field(
        "exactly_once",
        description="State is exact in both modes; outputs carry sk.* dedupe headers in both "
        "(Kafka transactions are not used yet; the app logs this at start)",
    )
    worker_gc_threshold: int = Field(
        50_000,
        ge=0,
        description="Python's generation-0 GC threshold while a Spark worker runs tasks, "
        "put back after them (0 keeps Python's 700): a batch allocates millions of "
        "short-lived objects, and the default let collections take ~20 ms per 12.5k-record "
        "task",
    )
    worker_full_gc_every: int = Field(
        50,
        ge=0,
        description="A reused Spark Python worker runs a full gc.collect() after every task; "
        "statekeeper freezes the objects alive after its tasks (gc.freeze) so that scan "
        "skips them (~40 ms of CPU per worker and batch measured), except after every Nth "
        "share, when it scans everything: cyclic garbage lives at most N batches. 0 never "
        "freezes",
    )
    commit_interval_ms: int = Field(
        5_000,
        ge=0,
        description="How often a task commits under backlog (Kafka Streams' "
        "commit.interval.ms): changelog markers and store writes. A batch that drained its "
        "source (fewer records than max_records_per_batch) always commits, so a caught-up app "
        "commits every micro-batch; while catching up, a task's state lives in its Spark "
        "worker between commits. Outputs are flushed every batch either way, so the interval "
        "bounds only how much a crash replays: the task replays its uncommitted micro-batches "
        "from Spark's offset log, and state and output dedupe ids stay exact. 0 commits every "
        "micro-batch",
    )
    max_uncommitted_batches: int = Field(
        20,
        ge=1,
        le=90,
        description="A task commits at least every this many micro-batches (the crash replay "
        "reads them back from Spark's offset log, which keeps the last 100 by default)",
    )
    max_records_per_batch: int = Field(
        2_000_000,
        ge=1,
        description="The most source records a micro-batch admits (all partitions): the "
        "ceiling of adaptive batches, or every batch's limit with adaptive_batches off",
    )
    adaptive_batches: bool = Field(
        True,
        description="Grow the records per micro-batch under a backlog (each batch about "
        "batch_target_ms), shrink them when caught up; bounded by min/max_records_per_batch "
        "and batch_memory_mb (statekeeper.app.batch_sizing)",
    )
    min_records_per_batch: int = Field(
        50_000,
        ge=1,
        description="Adaptive batches never admit fewer (a max_records_per_batch below it wins)",
    )
    batch_target_ms: int = Field(
        2_000,
        ge=50,
        description="Under a backlog, adaptive batches aim at this processing time per batch",
    )
    batch_memory_mb: int = Field(
        512,
        ge=1,
        description="What a micro-batch's records may take in the Python workers, all tasks "
        "together: bounds adaptive batches by the sampled record size",
    )
    trigger_interval_ms: int = Field(
        500, ge=10, description="Micro-batch trigger interval (non-zero: an idle query polls)"
    )
    starting_offsets: str = Field(
        "earliest", description='earliest | latest | JSON {"topic": {"0": offset}}'
    )
    checkpoint_dir: Path = Field(
        Path("var/checkpoints"), description="Spark checkpoints, one subdirectory per app"
    )
    status_host: str = Field("127.0.0.1", description="Status endpoint bind address")
    status_port: int | None = Field(
        0, ge=0, le=65535, description="Status endpoint port; 0 picks a free one, None disables"
    )
    status_file: Path | None = Field(
        None, description="Status JSON for supervisors; default <state_dir>/<app>/status.json"
    )
    snapshot_url: str | None = Field(
        None,
        description="Where snapshots go (fsspec URL: file:///path or s3://bucket/prefix); "
        "default: a 'snapshots' folder next to state_dir",
    )
    snapshot_s3_endpoint: str | None = Field(
        None, description="S3 endpoint URL for s3:// snapshot URLs (an S3-compatible server)"
    )
    snapshot_interval_s: float = Field(
        0.0,
        ge=0,
        description="A running app snapshots every task this often (seconds; each task right "
        "after a commit, uploaded in the background by its worker). 0 (default): only when "
        "requested (POST /snapshot on the status endpoint, `statekeeper snapshot create`)",
    )
    restore_from_snapshots: bool | None = Field(
        None,
        description="A task whose local store is missing or corrupt installs the newest "
        "verified snapshot and replays only the changelog tail (else the whole changelog). "
        "Default (unset): on when snapshot_url is set or the default snapshot folder holds "
        "snapshots of this app; true also when neither exists yet; false never",
    )
    restore_time_budget_s: float | None = Field(
        None,
        gt=0,
        description="The changelog audit snapshots an app whose forecast restore time (newest "
        "snapshot + changelog tail, a full replay where there is no snapshot, summed over its "
        "changelogs) exceeds this many seconds: running, through its status endpoint; stopped, "
        "from its local state. Default (unset): no budget",
    )
    allow_incompatible_state: bool = Field(
        False,
        description="Start even when the state was written by a topology this one cannot "
        "read as it is (a store's serde, kind or window size changed, a source topic's "
        "partition count changed; see `statekeeper upgrade plan` and docs/changing-apps.md): "
        "the stores named are read by the new code as they are. Use it only when you know "
        "the change is compatible",
    )
    spark_master: str = Field("local[2]", description="Spark master when not set by spark-submit")
    jvm_shutdown_wait_s: float = Field(
        30.0,
        ge=0,
        description="Launched by spark-submit (the JVM is the Python driver's parent, so a "
        "SIGTERM reaches the JVM): the JVM's shutdown first stops the app gracefully (finish "
        "the batch, commit, stop) and waits up to this long before Spark's own shutdown hooks "
        "stop the SparkContext. Keep it below the supervisor's kill timeout. 0: no wait "
        "(Spark stops under the running batch, which runs again on restart)",
    )
    num_standby_replicas: int = Field(
        0,
        ge=0,
        le=8,
        description="Standby copies of every task's stores, each on another executor, kept "
        "up to date from the changelog (Kafka Streams' num.standby.replicas); a task that "
        "moves to its standby's executor replays only the tail",
    )
    acceptable_recovery_lag: int = Field(
        10_000,
        ge=0,
        description="A standby copy at most this many changelog records behind is caught up: "
        "a task may move to it to even out the executors' load (Kafka Streams' name)",
    )
    fence_check_after_s: float = Field(
        10.0,
        gt=0,
        description="A task whose epoch was last confirmed longer ago than this (the driver "
        "placed its run, or it last checked) reads its changelogs for a newer epoch before "
        "it writes commit markers: a process that was frozen stops there (docs/fencing.md). "
        "Keep it below the time Spark takes to give up on a frozen executor",
    )
    fence_scan_interval_s: float = Field(
        30.0,
        gt=0,
        description="At most this long between a task's reads of its changelogs' tails "
        "before a commit: keys a fenced writer (a resumed zombie) wrote since the task opened "
        "are logged again with the task's values, so compaction never keeps a fenced record "
        "as a key's newest (docs/fencing.md)",
    )
    executor_services_process: bool = Field(
        True,
        description="Run each executor's standbys, query server and snapshot uploads in a "
        "process of their own (started by the first task that needs one, ending with the "
        "executor's JVM); false: inside one of its Python workers (the uploads in every "
        "worker), sharing the GIL with the tasks",
    )
    executor_services_nice: int = Field(
        10,
        ge=0,
        le=19,
        description="The service process's niceness (executor_services_process): the tasks "
        "come first when the cores are busy, queries, standbys and uploads take what is left "
        "(0: the same priority as the tasks)",
    )
    query_host: str = Field("127.0.0.1", description="Bind address of each executor's query server")
    query_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Port of each executor's interactive-query server; 0 picks a free port per "
        "executor; unset: no query server",
    )
    query_max_page_size: int = Field(
        1000, ge=1, description="Most entries one range/prefix/window query page returns"
    )
    query_max_key_bytes: int = Field(
        64 * 1024, ge=1, description="Longest key (encoded) a query accepts"
    )
    query_max_staleness_ms: int = Field(
        250,
        ge=0,
        description="A query arriving while another follows the task's writes is answered "
        "from the view's last state only if that state was known current at most this long "
        "ago; otherwise it waits for the view to catch up (0: always wait)",
    )
    embedded_broker_port: int = Field(9092, ge=1, le=65535)
    embedded_broker_dir: Path = Field(Path("var/broker"), description="Embedded broker run dir")

    @model_validator(mode="after")
    def _check_memory(self) -> StatekeeperSettings:
        if self.write_buffer_bytes > self.block_cache_bytes:
            raise ValueError(
                f"write_buffer_bytes ({self.write_buffer_bytes}) must not exceed "
                f"block_cache_bytes ({self.block_cache_bytes}): the memtables are part of it"
            )
        return self

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_bootstrap(cls, value: str) -> str:
        for server in value.split(","):
            host, sep, port = server.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"expected host:port[,host:port], got {value!r}")
        return value

    def checkpoint_path(self) -> Path:
        """The app's Spark checkpoint directory: ``<checkpoint_dir>/<application_id>``,
        absolute (Spark resolves it from the driver's working directory)."""
        return Path(self.checkpoint_dir).absolute() / self.application_id

    def status_path(self) -> Path:
        """Where the app writes its status document: ``status_file``, else
        ``<state_dir>/<application_id>/status.json``."""
        return Path(self.status_file or Path(self.state_dir) / self.application_id / "status.json")


#: Where a value came from, for error messages: (the name it is shown under, where it was
#: set), e.g. ("settings.state_dir", "at app.yaml:7") or ("state_dir", "from --set
#: state_dir=x"); None: not set explicitly (a default, or an environment variable).
SourceOf = Callable[[str], "tuple[str, str] | None"]


def env_var(field: str) -> str:
    """The environment variable of a settings field: ``STATEKEEPER_<FIELD>``."""
    return f"STATEKEEPER_{field.upper()}"


def close_names(name: str, known: Iterable[str]) -> str:
    """`` (did you mean x?)`` when ``name`` is close to one of ``known``, else ``""``."""
    found = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return f" (did you mean {found[0]}?)" if found else ""


def describe_error(
    err: Mapping[str, Any], name: str, where: str | None, known: Iterable[str] = ()
) -> str:
    """One pydantic error as ``name: problem (got value) where``: an unknown field says so,
    with the close names among ``known``."""
    if err["type"] == "extra_forbidden":
        leaf = name.rsplit(".", 1)[-1]
        text = f"{name}: unknown field{close_names(leaf, known)}"
    else:
        message = str(err["msg"]).removeprefix("Value error, ")
        shown = repr(err.get("input"))
        got = "" if err["type"] == "missing" or shown in message else f" (got {shown})"
        text = f"{name}: {message}{got}"
    return f"{text} {where}" if where else text


def settings_from(
    values: Mapping[str, object], source_of: SourceOf | None = None
) -> StatekeeperSettings:
    """Settings from env + ``values``; a bad value raises one ConfigError naming each problem
    and where its value came from: ``source_of(field)`` for the fields of ``values``, the
    environment variable for the others."""
    try:
        return StatekeeperSettings(**values)  # type: ignore[arg-type]
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc: Sequence[Any] = err["loc"]
            field = str(loc[0]) if loc else ""
            name, where = ".".join(str(p) for p in loc) or "settings", None
            source = source_of(field) if source_of is not None and field in values else None
            if source is not None:
                shown, where = source
                name = ".".join([shown, *(str(p) for p in loc[1:])])
            elif field and field not in values and env_var(field) in os.environ:
                where = f"from env {env_var(field)}"
            problems.append(describe_error(err, name, where, StatekeeperSettings.model_fields))
        raise ConfigError(f"invalid statekeeper settings: {'; '.join(problems)}") from exc


def load_settings(**overrides: object) -> StatekeeperSettings:
    """Build settings from env + overrides, turning validation errors into one clear ConfigError."""
    return settings_from(overrides)
