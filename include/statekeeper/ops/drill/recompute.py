"""Check c: truth. Re-compute each store from the source topics with the app's own topology
and diff it with the restored state.

For each task, the app's topology runs in batch, in-process, over the task's source
partitions from where the app started (``starting_offsets``: the log start for
``earliest``) up to the source offsets recorded with the restored state's last commit
marker, into fresh stores of a separate sandbox directory with logging disabled (no
changelog, no producer: a read-only task environment). Records go through
:class:`~statekeeper.processing.stream_task.StreamTask` record at a time (``vectorize=False``,
so the result does not depend on how the app cut its micro-batches), and outputs are
counted and dropped. This checks the recovery machinery (snapshot, changelog, restore), not
the business logic: both sides run the same processors. A store that differs shows up to 20
keys with their restored, recomputed and live values (the live store read-only, where this
machine has a copy of it).

Limits: the internal task-state store (stream time, punctuation schedules, dedupe positions)
is not compared (it records batch boundaries); a topology whose wall-clock punctuations
change state depends on batch times this batch run cannot reproduce; records are held in
memory (drills are sized like the app's state).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.model import OffsetRange, tp_key
from statekeeper.kafka.offsets import log_start_offsets
from statekeeper.kafka.range_reader import read_ranges
from statekeeper.ops.drill.contents import (
    Contents,
    diff_contents,
    diff_result,
    live_values,
    store_contents,
)
from statekeeper.ops.drill.record import SKIPPED, CheckResult
from statekeeper.ops.drill.sandbox import RestoredTask
from statekeeper.processing.stream_task import StreamTask
from statekeeper.processing.task_state_store import STORE_PREFIX
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.environment import StateEnvironment


class DiscardingEmitter:
    """Takes a stream task's outputs (and dead letters) and only counts them."""

    def __init__(self) -> None:
        self.sent = 0

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Any = None,
        timestamp_ms: int | None = None,
        partition: int | None = None,
    ) -> None:
        self.sent += 1


class NotRecomputable(Exception):
    """The task's inputs cannot be re-read as the app read them; the message says why."""


def _start_offsets(
    settings: StatekeeperSettings, tps: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """Where the app started reading each partition (``settings.starting_offsets``)."""
    how = settings.starting_offsets.strip()
    starts = log_start_offsets(
        consumer_config(settings.bootstrap_servers), tps, settings.broker_timeout_s
    )
    if how == "earliest":
        return starts
    if how == "latest":
        raise NotRecomputable(
            "the app starts at the latest offsets, so where it began reading is not recorded"
        )
    try:
        given = json.loads(how)
        return {(t, p): int(given[t][str(p)]) for t, p in tps}
    except (ValueError, KeyError, TypeError) as exc:
        raise NotRecomputable(f"starting_offsets {how!r} does not name every input: {exc}") from exc


def source_ranges(
    settings: StatekeeperSettings, topology: Any, task: RestoredTask
) -> list[OffsetRange]:
    """The input ranges the restored state has processed: start of reading to its marker."""
    topics = topology.subtopology_topics(settings.application_id, task.subtopology)
    tps = [(t, task.partition) for t in topics if tp_key(t, task.partition) in task.source_offsets]
    if not tps:
        return []
    starts = _start_offsets(settings, tps)
    return [
        OffsetRange(t, p, starts[(t, p)], task.source_offsets[tp_key(t, p)])
        for t, p in tps
        if task.source_offsets[tp_key(t, p)] > starts[(t, p)]
    ]


def recompute_task(
    settings: StatekeeperSettings, topology: Any, task: RestoredTask, sandbox: Path
) -> tuple[dict[str, Contents], int]:
    """The task's stores recomputed from its inputs in ``sandbox`` (see the module
    docstring); also the number of input records read."""
    ranges = source_ranges(settings, topology, task)
    records = (
        read_ranges(consumer_config(settings.bootstrap_servers), ranges, settings.broker_timeout_s)
        if ranges
        else {}
    )
    read = sum(len(r) for r in records.values())
    batch_time = max((r[-1].timestamp_ms for r in records.values() if r), default=0)
    unlogged = [dataclasses.replace(s, logging_enabled=False) for s in task.specs]
    fresh = settings.model_copy(update={"state_dir": Path(sandbox)})
    env = StateEnvironment(fresh, read_only=True, check_broker=False)
    try:
        state = env.task(task.task_id, task.partition, unlogged)
        state.open()
        try:
            stream = StreamTask(
                topology,
                task.subtopology,
                task.partition,
                state,
                DiscardingEmitter(),
                settings.application_id,
                vectorize=False,
            )
            stream.process_batch(task.batch_id or 0, batch_time, records)
            stream.close()
            return {s.name: store_contents(state.store(s.name)) for s in unlogged}, read
        finally:
            state.close()
    finally:
        env.close()


def check_truth(
    settings: StatekeeperSettings, topology: Any, task: RestoredTask, sandbox: Path
) -> dict[str, CheckResult]:
    """Check c for every store of ``task``."""
    try:
        recomputed, read = recompute_task(settings, topology, task, sandbox)
    except NotRecomputable as exc:
        return {name: CheckResult(SKIPPED, str(exc)) for name in task.stores}
    results: dict[str, CheckResult] = {}
    for name, store in task.stores.items():
        if name.startswith(STORE_PREFIX):
            results[name] = CheckResult(
                SKIPPED, "internal task state (stream time, schedules): batch-dependent"
            )
            continue
        diff = diff_contents(recomputed[name], store.contents)
        what = f"the recomputation from {read} input record(s)"
        results[name] = diff_result(
            store.spec,
            diff,
            what,
            expected_as="recomputed",
            passed=f"{len(store.contents)} keys equal to {what}",
            live=live_values(settings, task.task_id, store.spec, diff.examples),
        )
    return results
