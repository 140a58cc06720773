"""A backfill: the app's own topology run over its sources' history as a bounded run.

:func:`prepare_backfill` makes every check and decision before Spark starts (nothing is
written): the app must not be running, ``--until`` becomes concrete offsets (``now``: the
log ends read now), and :mod:`~statekeeper.backfill.start` decides where the query starts.
:func:`run_backfill` records a fresh query's start, then runs
:class:`~statekeeper.app.statekeeper_app.StatekeeperApp` under the app's own application id
and Spark checkpoint with ``stop_at_offsets`` = the until offsets and large micro-batches,
until every source partition reached its until offset and every repartition topic is read
to its end; every task commits, and (unless ``snapshot=False``) every stateful task is
snapshotted before the stop. The stream (``statekeeper app run``) then continues from the
same checkpoint: where the backfill stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.app.recorded_start import record_start
from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.app.topics import source_partitions
from statekeeper.backfill.bounds import FromSpec, UntilSpec, resolve_until
from statekeeper.backfill.report import BackfillReport, Progress
from statekeeper.backfill.start import FROM_SETTING, StartPlan, decide_start, read_history
from statekeeper.backfill.timestamps import offsets_for_timestamp
from statekeeper.changelog.records import changelog_topic
from statekeeper.errors import ConfigError
from statekeeper.spark.checkpoint_log import last_committed_positions
from statekeeper.spark.offset_planning import (
    parse_offset_spec,
)

TP = tuple[str, int]

#: Source records per micro-batch of a backfill, unless the app's own setting is larger or
#: ``max_records_per_batch`` is given: 8x the app default, so fewer, larger batches, each
#: writing every key it touches once.
BACKFILL_MAX_RECORDS = 2_000_000
#: Idle this long after the last micro-batch (and caught up to --until) before stopping.
IDLE_S = 1.0


@dataclass(frozen=True)
class PreparedBackfill:
    """Everything decided before Spark starts."""

    spec: Any  # the AppSpec
    settings: Any
    topology: Any
    from_spec: FromSpec
    until: dict[TP, int]
    plan: StartPlan
    start_offsets: dict[TP, int] | None  # to record before the query starts (a new query)
    positions: dict[TP, int]  # source positions before the backfill
    checkpoint: Path


def prepare_backfill(
    spec: Any,
    settings: Any,
    from_spec: FromSpec,
    until_spec: UntilSpec,
    *,
    max_records_per_batch: int | None = None,
) -> PreparedBackfill:
    """Check and decide; raises a :class:`~statekeeper.errors.ConfigError` (one line) for
    whatever the backfill refuses."""
    from statekeeper.kafka.adapter import consumer_config
    from statekeeper.kafka.admin import make_admin, wait_for_broker
    from statekeeper.kafka.offsets import log_end_offsets, log_start_offsets
    from statekeeper.ops.snapshot_app import running_app_status_url

    app_id = settings.application_id
    records = max_records_per_batch or max(settings.max_records_per_batch, BACKFILL_MAX_RECORDS)
    # A bounded history is all backlog: every batch admits the full size from the first
    # (adaptive batches would start small and grow).
    settings = settings.model_copy(
        update={"max_records_per_batch": records, "adaptive_batches": False}
    )
    topology = spec.build_topology()
    url = running_app_status_url(settings)
    if url is not None:
        raise ConfigError(f"app {app_id} is running ({url}): stop it before a backfill")
    timeout = settings.broker_timeout_s
    wait_for_broker(settings.bootstrap_servers, timeout)
    admin = make_admin(settings.bootstrap_servers)
    sources = source_partitions(admin, topology, app_id, timeout)
    conf = consumer_config(settings.bootstrap_servers, group_id=f"{app_id}-backfill")
    tps = [(t, p) for t, n in sorted(sources.items()) for p in range(n)]
    ends = log_end_offsets(conf, tps, timeout)
    until = resolve_until(until_spec, sources, ends)

    checkpoint = settings.checkpoint_path()
    changelogs = changelog_records(admin, conf, topology, app_id, timeout)
    history = read_history(settings, topology, checkpoint, changelogs)
    plan = decide_start(history, from_spec)

    start_offsets = None
    starts = log_start_offsets(conf, tps, timeout)
    if plan.record is not None:
        if plan.record == FROM_SETTING:
            spec_offsets = parse_offset_spec(settings.starting_offsets, FROM_SETTING, "earliest")
            start_offsets = spec_offsets.resolve(tps, starts, ends)
        elif from_spec.timestamp_ms is not None and plan.record == from_spec.label:
            start_offsets = offsets_for_timestamp(
                conf, from_spec.timestamp_ms, starts, ends, timeout
            )
        else:
            start_offsets = starts
    # Where the sources stand before the backfill: Spark's last committed micro-batch, else
    # where the query starts (recorded now or before, a takeover's), else the log start.
    positions = {
        **starts,
        **_takeover_start(history.takeover, settings, checkpoint),
        **(history.recorded.offsets if history.recorded else {}),
        **(start_offsets or {}),
        **_source_positions(checkpoint, sources),
    }
    return PreparedBackfill(
        spec, settings, topology, from_spec, until, plan, start_offsets, positions, checkpoint
    )


def changelog_records(
    admin: Any, conf: dict[str, Any], topology: Any, app_id: str, timeout: float
) -> dict[str, int]:
    """Records (log end offsets summed) in each changelog topic of the app that exists."""
    from statekeeper.kafka.admin import partition_count
    from statekeeper.kafka.offsets import log_end_offsets

    found: dict[str, int] = {}
    for sub in topology.subtopologies:
        for store in topology.store_specs(sub.id):
            topic = changelog_topic(app_id, store.name)
            count = partition_count(admin, topic, timeout) if store.logging_enabled else None
            if count:
                tp_ends = log_end_offsets(conf, [(topic, p) for p in range(count)], timeout)
                found[topic] = sum(tp_ends.values())
    return found


def run_backfill(
    prepared: PreparedBackfill,
    *,
    snapshot: bool = True,
    progress: Callable[[str], None] | None = None,
) -> BackfillReport:
    """Run the bounded run to its end (see the module docs); returns its report."""
    p = prepared
    if p.start_offsets is not None:
        record_start(p.checkpoint, p.start_offsets, p.plan.record or "earliest")
    app = StatekeeperApp(
        p.topology, p.settings, spark_conf=p.spec.spark.conf, stop_at_offsets=p.until
    )
    start = dict(p.positions)
    if progress is not None:
        app.add_batch_listener(Progress(p.until, start, progress))
    started = time.monotonic()
    app.run(stop_when_idle=True, idle_s=IDLE_S, snapshot_before_stop=snapshot)
    seconds = time.monotonic() - started
    after = {**start, **_source_positions(p.checkpoint, _partition_counts(p.until))}
    status = app.board.snapshot()
    totals = status.get("totals") or {}
    notes = [
        f"{t}[{n}] was at {start[(t, n)]}, past --until {end}: the stream continues there"
        for (t, n), end in sorted(p.until.items())
        if start.get((t, n), 0) > end
    ]
    taken = _snapshot_report(app) if snapshot else None
    if taken is not None and taken["state"] != "uploaded":
        notes.append(
            f"the snapshot is {taken['state']} ({taken.get('errors') or 'no errors reported'}): "
            "the state is committed; a restore replays the changelogs until the next snapshot "
            "(`statekeeper snapshot create`)"
        )
    return BackfillReport(
        application_id=p.settings.application_id,
        start=p.plan.note,
        from_=p.from_spec.label,
        start_offsets={tp: start[tp] for tp in p.until},
        until=dict(p.until),
        stream_continues_at={tp: after[tp] for tp in p.until},
        source_records=sum(max(0, after[tp] - start[tp]) for tp in p.until),
        records_processed=int(totals.get("records_processed", 0)),
        batches=int((status.get("throughput") or {}).get("batches", 0)),
        seconds=seconds,
        tasks=len(status.get("tasks") or {}),
        max_records_per_batch=p.settings.max_records_per_batch,
        checkpoint=str(p.checkpoint),
        snapshot=taken,
        notes=notes,
    )


def _partition_counts(offsets: dict[TP, int]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for topic, partition in offsets:
        counts[topic] = max(counts.get(topic, 0), partition + 1)
    return counts


def _takeover_start(takeover: bool, settings: Any, checkpoint: Path) -> dict[TP, int]:
    """A migrated app's query start (its takeover record), when it has one."""
    if not takeover:
        return {}
    from statekeeper.app.takeover_start import ADOPTED_FILE
    from statekeeper.versions.recorded import state_root
    from statekeeper.versions.takeover import read_takeover, takeover_path

    record = read_takeover(checkpoint / ADOPTED_FILE) or read_takeover(
        takeover_path(state_root(settings.state_dir, settings.application_id))
    )
    if record is None:
        return {}
    return parse_offset_spec(record.starting_offsets_json(), "takeover", "earliest").offsets


def _source_positions(checkpoint: Path, sources: dict[str, int]) -> dict[TP, int]:
    """The source offsets of Spark's newest committed micro-batch (empty: none)."""
    offsets = last_committed_positions(checkpoint)
    return {tp: o for tp, o in offsets.items() if tp[0] in sources}


def _snapshot_report(app: StatekeeperApp) -> dict[str, Any]:
    """The snapshot taken before the stop: its request's state and ids per task and store."""
    requested = app.final_snapshot
    if requested is None:
        return {"request_id": None, "state": "not taken", "snapshot_ids": {}}
    rid = requested["request_id"]
    request = app.snapshots.status().get(rid, requested)
    ids = {
        tid: dict(task.get("snapshot_ids") or {})
        for tid, task in sorted(app.snapshots.task_status().items())
        if task.get("request_id") == rid and task.get("snapshot_ids")
    }
    return {
        "request_id": rid,
        "state": request.get("state"),
        "tasks": dict(request.get("tasks") or {}),
        "errors": list(request.get("errors") or []),
        "snapshot_ids": ids,
    }
