"""Planning where the new version takes over (:mod:`statekeeper.versions.takeover`).

Run after every task was migrated, so what the old version committed is known per task, and
in this order (which is what makes it exact while the old version may still be running):
the migrated tasks' markers (already read), then the old version's Spark checkpoint (its last
committed micro-batch ``N`` and where that batch ended, ``L``), then the old repartition
topics' ends. Every record of a micro-batch up to ``N`` is in the old repartition topics
before Spark logs ``N`` committed, so the ranges read last hold all of them.

:func:`plan_takeover` is pure (the facts in, the record out); :func:`read_takeover_facts`
reads the facts.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from statekeeper.spark.checkpoint_log import last_committed_batch, last_committed_positions
from statekeeper.state.task_id import TaskId
from statekeeper.versions.takeover import CarriedTopic, Takeover, TakeoverError

TP = tuple[str, int]


@dataclass(frozen=True)
class OldCommit:
    """What one task of the old version committed (from its migration): batch id and next
    source offsets per ``topic:partition``; ``batch_id`` None when it never committed."""

    task_id: str
    batch_id: int | None
    source_offsets: Mapping[str, int]


@dataclass(frozen=True)
class TakeoverFacts:
    """What the plan is made of besides the topologies (read by :func:`read_takeover_facts`).

    ``last_batch``: the old version's last committed micro-batch (None: it committed none);
    ``batch_end``: where that batch ended per source partition; ``repartition_start`` and
    ``repartition_end``: the old repartition topics' log start and end per partition."""

    last_batch: int | None
    batch_end: Mapping[TP, int]
    repartition_start: Mapping[TP, int]
    repartition_end: Mapping[TP, int]
    #: Where the old version's Spark checkpoint is, None when it has no offset log here.
    checkpoint: str | None = "checkpoint"


def read_takeover_facts(
    old_settings: Any, old_topology: Any, partitions: Mapping[str, int]
) -> TakeoverFacts:
    """The old version's last committed micro-batch (from its Spark checkpoint), then its
    repartition topics' start and end offsets (from the broker), in that order."""
    from statekeeper.kafka.adapter import consumer_config
    from statekeeper.kafka.offsets import log_end_offsets, log_start_offsets

    checkpoint = old_settings.checkpoint_path()
    found = (checkpoint / "offsets").is_dir()
    last = last_committed_batch(checkpoint) if found else None
    batch_end = last_committed_positions(checkpoint) if last is not None else {}
    app = old_settings.application_id
    topics = old_topology.internal_topics(app)
    tps = [(t, p) for t in topics for p in range(partitions.get(t, 0))]
    conf = consumer_config(old_settings.bootstrap_servers, group_id=f"{app}-takeover")
    timeout = old_settings.broker_timeout_s
    return TakeoverFacts(
        last_batch=last,
        batch_end=batch_end,
        repartition_start=log_start_offsets(conf, tps, timeout),
        repartition_end=log_end_offsets(conf, tps, timeout),
        checkpoint=str(checkpoint) if found else None,
    )


def plan_takeover(
    *,
    old_topology: Any,
    new_topology: Any,
    old_app: str,
    new_app: str,
    partitions: Mapping[str, int],
    commits: Iterable[OldCommit],
    facts: TakeoverFacts,
) -> Takeover:
    """The takeover record (module docstring of :mod:`statekeeper.versions.takeover`).

    ``partitions``: partition counts of the source topics and of both versions' repartition
    topics; ``commits``: one per migrated task of the new version. Raises
    :class:`TakeoverError` when the cut cannot be exact: a stateful old task that feeds a
    repartition topic committed less than the old version's last micro-batch processed (its
    records since are in the repartition topic already, and the new version would produce
    them again), or an old repartition topic with unconsumed records and no counterpart."""
    by_task = {c.task_id: c for c in commits}
    n = facts.last_batch
    top_batch = max([n if n is not None else -1, *(c.batch_id or -1 for c in by_task.values())])
    _check_upstream_settled(old_topology, old_app, partitions, by_task, facts)

    floors: dict[int, dict[str, dict[int, int]]] = {}
    start: dict[str, dict[int, int]] = {}
    notes: list[str] = []
    old_stateful = {s.id for s in old_topology.subtopologies if old_topology.store_specs(s.id)}
    for sub in new_topology.subtopologies:
        for ref in sub.source_refs:
            if ref.repartition:
                continue
            topic = ref.resolve(new_app)
            for p in range(partitions.get(topic, 0)):
                floor = _floor(sub.id, topic, p, by_task, old_stateful, facts)
                if floor is None:  # nothing committed for it: from the log's start
                    start.setdefault(topic, {})[p] = -2
                    continue
                floors.setdefault(sub.id, {}).setdefault(topic, {})[p] = floor
                current = start.setdefault(topic, {}).get(p)
                if current != -2:
                    start[topic][p] = floor if current is None else min(current, floor)
                ended = facts.batch_end.get((topic, p))
                if ended is not None and floor < ended:
                    notes.append(
                        f"task {TaskId(sub.id, p)} committed {topic}[{p}] up to {floor}, the "
                        f"old version's last micro-batch ended at {ended}: the new version "
                        "processes the records between again (its state is exact; outputs of "
                        "the old version's uncommitted batches are emitted again, with new "
                        "dedupe ids)"
                    )
    carried = _carried(old_topology, new_topology, old_app, new_app, partitions, by_task, facts)
    return Takeover(
        from_application_id=old_app,
        batch_base=top_batch + 1,
        start_offsets=start,
        floors=floors,
        carried=tuple(carried),
        notes=tuple(notes),
        planned_at_ms=int(time.time() * 1000),
    )


def _floor(
    sub: int,
    topic: str,
    partition: int,
    by_task: Mapping[str, OldCommit],
    old_stateful: set[int],
    facts: TakeoverFacts,
) -> int | None:
    """The first offset of ``topic[partition]`` the new task processes: its migrated
    markers' offset; where the old version's last micro-batch ended for a task without
    state of its own (stateless, or new); None (from the start) for a stateful old task
    that never committed."""
    commit = by_task.get(str(TaskId(sub, partition)))
    key = f"{topic}:{partition}"
    if commit is not None and commit.batch_id is not None and key in commit.source_offsets:
        return int(commit.source_offsets[key])
    if sub in old_stateful:
        return None
    if facts.checkpoint is None:
        raise TakeoverError(
            f"task {TaskId(sub, partition)} has no migrated state and would start where the "
            "old version's last micro-batch ended, which only the old version's Spark "
            "checkpoint records, and there is none here (run the migration where the old "
            "version ran, with its checkpoint_dir)"
        )
    return facts.batch_end.get((topic, partition))


def _check_upstream_settled(
    old_topology: Any,
    old_app: str,
    partitions: Mapping[str, int],
    by_task: Mapping[str, OldCommit],
    facts: TakeoverFacts,
) -> None:
    problems = []
    for sub in old_topology.subtopologies:
        feeds = any(ref.repartition for ref in sub.sink_refs)
        if not feeds or not old_topology.store_specs(sub.id):
            continue
        for ref in sub.source_refs:
            topic = ref.resolve(old_app)
            for p in range(partitions.get(topic, 0)):
                ended = facts.batch_end.get((topic, p))
                commit = by_task.get(str(TaskId(sub.id, p)))
                committed = None if commit is None else commit.source_offsets.get(f"{topic}:{p}")
                if ended is not None and committed != ended:
                    problems.append(
                        f"task {TaskId(sub.id, p)} committed {topic}[{p}] up to {committed} "
                        f"and the old version's last micro-batch ended at {ended}"
                    )
    if problems:
        raise TakeoverError(
            "the new version cannot take over exactly: "
            + "; ".join(problems)
            + ". These tasks feed a repartition topic, whose records since their commit "
            "would be produced again. Stop the old version cleanly (SIGTERM: every task "
            "commits), or start it once and stop it, then migrate again"
        )


def _carried(
    old_topology: Any,
    new_topology: Any,
    old_app: str,
    new_app: str,
    partitions: Mapping[str, int],
    by_task: Mapping[str, OldCommit],
    facts: TakeoverFacts,
) -> list[CarriedTopic]:
    new_readers = {
        ref.resolve(new_app): sub.id
        for sub in new_topology.subtopologies
        for ref in sub.source_refs
        if ref.repartition
    }
    carried = []
    for sub in old_topology.subtopologies:
        for ref in sub.source_refs:
            if not ref.repartition:
                continue
            old_topic, new_topic = ref.resolve(old_app), ref.resolve(new_app)
            ranges: dict[int, tuple[int, int]] = {}
            reader = new_readers.get(new_topic)
            for p in range(partitions.get(old_topic, 0)):
                end = facts.repartition_end.get((old_topic, p), 0)
                begin = facts.repartition_start.get((old_topic, p), 0)
                done = _marked(by_task, reader, f"{old_topic}:{p}")
                first = max(begin, done if done is not None else begin)
                if end > first:
                    ranges[p] = (first, end)
            if not ranges:
                continue
            if facts.checkpoint is None:
                raise TakeoverError(
                    f"the old version's repartition topic {old_topic} holds records its "
                    "downstream tasks had not committed, and which of them its committed "
                    "micro-batches wrote only its Spark checkpoint says, and there is none "
                    "here (run the migration where the old version ran, with its "
                    "checkpoint_dir)"
                )
            if new_topic not in new_readers:
                raise TakeoverError(
                    f"the old version's repartition topic {old_topic} holds records its "
                    f"downstream tasks had not committed, and the new version reads no "
                    f"{new_topic} to carry them to: stop the old version drained, or keep "
                    "the grouping's name"
                )
            last = facts.last_batch if facts.last_batch is not None else -1
            width = partitions.get(new_topic, 0)
            fan_out = width if width != partitions.get(old_topic, 0) else None
            carried.append(CarriedTopic(old_topic, new_topic, last, ranges, fan_out))
    return carried


def _marked(by_task: Mapping[str, OldCommit], reader: int | None, tp: str) -> int | None:
    """Where the new reader tasks' migrated markers put ``tp`` of an old repartition topic:
    task ``p``'s for partition ``p``, or every task's when the state was re-keyed (each new
    task carries every old partition's offset). The lowest: no record is skipped."""
    if reader is None:
        return None
    marked = [
        int(c.source_offsets[tp])
        for c in by_task.values()
        if c.batch_id is not None
        and TaskId.parse(c.task_id).subtopology == reader
        and tp in c.source_offsets
    ]
    return min(marked, default=None)
