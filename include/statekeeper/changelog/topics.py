"""Creates and checks an application's changelog topics."""

from __future__ import annotations

from typing import Any

from statekeeper.changelog.records import changelog_topic
from statekeeper.errors import ChangelogTopicError
from statekeeper.kafka.admin import TopicReport, ensure_topic, partition_count
from statekeeper.stores.builders import CREATE_ONLY_CHANGELOG_CONFIGS, StoreSpec


def ensure_changelog_topics(
    admin: Any,
    application_id: str,
    specs: list[StoreSpec],
    source_partitions: int,
    *,
    timeout_s: float = 30.0,
) -> list[TopicReport]:
    """Create each logged store's changelog with the source's partition count (co-partitioned
    with the input), or check the existing one; any mismatch raises ChangelogTopicError."""
    if source_partitions < 1:
        raise ChangelogTopicError(f"source partition count must be >= 1, got {source_partitions}")
    reports = []
    for spec in specs:
        if not spec.logging_enabled:
            continue
        topic = changelog_topic(application_id, spec.name)
        existing = partition_count(admin, topic, timeout_s)
        if existing is not None and existing < source_partitions:
            raise ChangelogTopicError(
                f"changelog {topic!r} has {existing} partitions but the source has "
                f"{source_partitions}: tasks {existing}..{source_partitions - 1} would have no "
                "changelog. Delete and recreate the changelog (state is rebuilt from the "
                "source) or repartition the source."
            )
        configs = spec.changelog_topic_configs()
        if existing is not None:
            configs = {
                k: v
                for k, v in configs.items()
                if k not in CREATE_ONLY_CHANGELOG_CONFIGS or k in spec.topic_configs
            }
        reports.append(ensure_topic(admin, topic, source_partitions, configs, timeout_s=timeout_s))
    return reports


def check_changelog_topics(
    admin: Any, application_id: str, specs: list[StoreSpec], partition: int, timeout_s: float = 10.0
) -> None:
    """Fail clearly when a logged store's changelog is missing or lacks ``partition``."""
    for spec in specs:
        if not spec.logging_enabled:
            continue
        topic = changelog_topic(application_id, spec.name)
        count = partition_count(admin, topic, timeout_s)
        if count is None:
            raise ChangelogTopicError(
                f"changelog topic {topic!r} of store {spec.name!r} does not exist; run the app "
                "once (it creates its changelogs) or create it with cleanup.policy=compact"
            )
        if partition >= count:
            raise ChangelogTopicError(
                f"changelog {topic!r} has {count} partitions; task partition {partition} has "
                "no changelog partition (the source has more partitions than the changelog)"
            )
