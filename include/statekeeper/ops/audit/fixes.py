"""Apply the safe config fixes of an audit with IncrementalAlterConfigs.

Only ``cleanup.policy`` and ``retention.ms``, and where the broker compacts the cleaner's
``min.cleanable.dirty.ratio``, ``segment.ms`` and ``min.compaction.lag.ms``
(:mod:`statekeeper.ops.audit.cleaner` plans those only then) are changed: all take effect
without moving data. Partition counts and replication are reported, never changed. The
legacy AlterConfigs API is never used (it replaces every config of the topic, and the
embedded broker does not support it): one IncrementalAlterConfigs SET per key.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from statekeeper.errors import ChangelogTopicError
from statekeeper.ops.audit.findings import Finding

SAFE_TO_FIX = frozenset(
    {
        "cleanup.policy",
        "retention.ms",
        "min.cleanable.dirty.ratio",
        "segment.ms",
        "min.compaction.lag.ms",
    }
)


@dataclass(frozen=True)
class ConfigChange:
    """One config set on one topic by ``--fix``; ``before`` is None when it was not reported."""

    topic: str
    key: str
    before: str | None
    after: str


def planned_changes(
    topic: str, findings: Iterable[Finding], configs: dict[str, str | None]
) -> list[ConfigChange]:
    """The changes that would fix ``findings`` of ``topic`` (safe configs only)."""
    return [
        ConfigChange(topic, f.aspect, configs.get(f.aspect), f.fix)
        for f in findings
        if f.fix is not None and f.aspect in SAFE_TO_FIX
    ]


def apply_changes(admin: Any, changes: list[ConfigChange], timeout_s: float = 30.0) -> None:
    """Set every change, one IncrementalAlterConfigs request per topic."""
    by_topic: dict[str, list[ConfigChange]] = {}
    for change in changes:
        by_topic.setdefault(change.topic, []).append(change)
    resources = [
        ConfigResource(
            "topic",
            topic,
            incremental_configs=[
                ConfigEntry(c.key, c.after, incremental_operation=AlterConfigOpType.SET)
                for c in topic_changes
            ],
        )
        for topic, topic_changes in by_topic.items()
    ]
    if not resources:
        return
    futures = admin.incremental_alter_configs(resources, request_timeout=timeout_s)
    for resource, future in futures.items():
        try:
            future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise ChangelogTopicError(
                f"cannot change the configs of topic {resource.name!r}: {exc.args[0].str()}"
            ) from exc
