"""Before an app starts: check its source topics, create internal, changelog, DLQ and output
topics, and derive the task set (one task per subtopology and input partition, R1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statekeeper.changelog.topics import ensure_changelog_topics
from statekeeper.errors import ConfigError
from statekeeper.kafka.admin import ensure_topic, partition_count


@dataclass(frozen=True)
class TopicPlan:
    """Partition counts of every topic the app reads, and its tasks."""

    partitions: dict[str, int]  # source + repartition topics
    tasks: list[tuple[int, int]]  # (subtopology, partition)


def source_partitions(
    admin: Any, topology: Any, application_id: str, timeout_s: float
) -> dict[str, int]:
    """The partition count of every source topic; a ConfigError names the missing ones."""
    partitions: dict[str, int] = {}
    missing = []
    for topic in topology.source_topics(application_id):
        count = partition_count(admin, topic, timeout_s)
        if count is None:
            missing.append(topic)
        else:
            partitions[topic] = count
    if missing:
        raise ConfigError(
            f"source topic(s) {', '.join(sorted(missing))} do not exist; create them (e.g. "
            "`statekeeper generate --app ...`) before starting the app"
        )
    return partitions


def task_plan(topology: Any, application_id: str, sources: dict[str, int]) -> TopicPlan:
    """The partition counts and tasks :func:`prepare_topics` would give, creating nothing
    (operator reads: a diff of two versions)."""
    partitions = dict(sources)
    partitions.update(topology.repartition_partitions(application_id, partitions))
    tasks = [
        (sub.id, p)
        for sub in topology.subtopologies
        for p in range(
            max(
                (partitions[t] for t in topology.subtopology_topics(application_id, sub.id)),
                default=0,
            )
        )
    ]
    return TopicPlan(partitions, tasks)


def prepare_topics(
    admin: Any,
    topology: Any,
    application_id: str,
    timeout_s: float,
    sources: dict[str, int] | None = None,
) -> TopicPlan:
    """Create/check every topic of ``topology``; raise a clear error on anything missing.
    ``sources``: the source partition counts, when :func:`source_partitions` read them."""
    partitions = dict(
        sources
        if sources is not None
        else source_partitions(admin, topology, application_id, timeout_s)
    )
    width = max(partitions.values(), default=1)
    for topic, count in topology.repartition_partitions(application_id, partitions).items():
        ensure_topic(admin, topic, count, timeout_s=timeout_s)
        partitions[topic] = count
    topology.check_copartitioning(application_id, partitions)

    tasks: list[tuple[int, int]] = []
    for sub in topology.subtopologies:
        sub_partitions = max(
            (partitions[t] for t in topology.subtopology_topics(application_id, sub.id)),
            default=0,
        )
        specs = topology.store_specs(sub.id)
        if specs:
            ensure_changelog_topics(
                admin, application_id, specs, sub_partitions, timeout_s=timeout_s
            )
        tasks.extend((sub.id, p) for p in range(sub_partitions))

    ensure_topic(admin, topology.dlq_topic(application_id), width, timeout_s=timeout_s)
    for topic in topology.output_topics(application_id):
        if partition_count(admin, topic, timeout_s) is None:
            ensure_topic(admin, topic, width, timeout_s=timeout_s)
    return TopicPlan(partitions, tasks)
