"""RPO figures of a drill: how far the restored state is behind the live head.

- snapshot age: seconds between a store's snapshot and the drill (None without snapshot);
- changelog records behind: records in the changelog after the restored commit marker
  (an app still writing, or an uncommitted tail);
- source records behind: input records past the source offsets of the restored commit,
  i.e. committed-or-not input the restored state has not yet processed.
Log ends are read to partition EOF (invariant 5).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from statekeeper.changelog.records import changelog_topic
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.model import tp_key
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.ops.drill.sandbox import RestoredTask
from statekeeper.settings import StatekeeperSettings


def snapshot_age_s(created: datetime, now: datetime) -> float:
    return max(0.0, (now - created).total_seconds())


def measure_rpo(
    settings: StatekeeperSettings, topology: Any, tasks: list[RestoredTask]
) -> tuple[dict[tuple[str, str], int], int]:
    """(changelog records behind per (task, store), source records behind in total)."""
    app = settings.application_id
    changelogs = {
        (t.task_id, name): (changelog_topic(app, name), t.partition)
        for t in tasks
        for name, s in t.stores.items()
        if s.spec.logging_enabled
    }
    sources = {
        (topic, t.partition): t
        for t in tasks
        for topic in topology.subtopology_topics(app, t.subtopology)
    }
    ends = log_end_offsets(
        consumer_config(settings.bootstrap_servers),
        [*changelogs.values(), *sources.keys()],
        settings.broker_timeout_s,
    )
    behind: dict[tuple[str, str], int] = {}
    for (task, name), tp in changelogs.items():
        store = next(t for t in tasks if t.task_id == task).stores[name]
        marker = store.metadata.changelog_offset
        behind[(task, name)] = max(0, ends[tp] - (0 if marker is None else marker + 1))
    source_behind = 0
    for (topic, partition), task in sources.items():
        done = task.source_offsets.get(tp_key(topic, partition))
        if done is not None:
            source_behind += max(0, ends[(topic, partition)] - done)
        else:
            source_behind += ends[(topic, partition)]  # never processed: all of it (from 0)
    return behind, source_behind
