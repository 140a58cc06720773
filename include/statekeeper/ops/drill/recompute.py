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

An app whose state was migrated from another version (``takeover.json`` in its state root,
docs/changing-apps.md) is not re-run: its state began as the old version's, which this
topology over this app's own inputs does not reproduce (the old version's part came through
its own topics). Its truth is checked with ``drill --spark`` and the spec's
``drill_model:``, which recomputes over the whole input.

Limits: the internal task-state store (stream time, punctuation schedules, dedupe positions)
is not compared (it records batch boundaries); a topology whose wall-clock punctuations
change state depends on batch times this batch run cannot reproduce; records are held in
memory (drills are sized like the app's state).
"""

from __future__ import annotations

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
from statekeeper.processing.sandbox_run import run_in_sandbox
from statekeeper.processing.task_state_store import STORE_PREFIX
from statekeeper.settings import StatekeeperSettings


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
    recomputed = run_in_sandbox(
        settings,
        topology,
        task.task_id,
        task.subtopology,
        task.partition,
        task.specs,
        records,
        Path(sandbox),
        lambda state: {s.name: store_contents(state.store(s.name)) for s in task.specs},
        batch_id=task.batch_id or 0,
    )
    return recomputed, read


def migrated_from(settings: StatekeeperSettings) -> str | None:
    """The application id the app's state was migrated from (its takeover record), or
    None."""
    from statekeeper.versions.recorded import state_root
    from statekeeper.versions.takeover import read_takeover, takeover_path

    found = read_takeover(takeover_path(state_root(settings.state_dir, settings.application_id)))
    return None if found is None else found.from_application_id


def check_truth(
    settings: StatekeeperSettings, topology: Any, task: RestoredTask, sandbox: Path
) -> dict[str, CheckResult]:
    """Check c for every store of ``task``."""
    took_over = migrated_from(settings)
    if took_over is not None:
        reason = (
            f"the state was migrated from {took_over} (takeover.json): this topology re-run "
            f"over this app's inputs leaves out what {took_over} counted; drill --spark (the "
            "spec's drill_model:) checks it against the whole input"
        )
        return {name: CheckResult(SKIPPED, reason) for name in task.stores}
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
