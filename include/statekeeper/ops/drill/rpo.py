"""RPO figures of a drill: how far the restored state is behind the live head.

In the order a drill reports them:

1. committed records behind the live head: data records of the changelog after the restored
   commit marker that a later marker commits, up to the changelog's last commit marker (the
   live head): what a restore *now* would bring back on top of the drilled state. Read
   through the changelog's fencing rule (:class:`~statekeeper.changelog.fencing.CommitSplitter`),
   so an uncommitted tail and a fenced writer's records do not count. 0 for a stopped app
   (the sandbox restored to the last marker); a running app's commits since the restore;
2. snapshot age: seconds between a store's snapshot and the drill (None without snapshot);

and beside them: every changelog offset after the restored marker (commits, markers, an
uncommitted tail), and source records behind: input records past the source offsets of the
restored commit, i.e. committed-or-not input the restored state has not yet processed.
Log ends are read to partition EOF (invariant 5).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from statekeeper.changelog.fencing import CommitSplitter
from statekeeper.changelog.records import CommitMarker, changelog_topic
from statekeeper.errors import BrokerUnavailableError
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.model import tp_key
from statekeeper.kafka.offsets import log_end_offsets, watermarks
from statekeeper.kafka.partition_reader import (
    TP,
    PartitionFetchError,
    PartitionReader,
    ReadStalledError,
    assign_at,
    eof_consumer,
)
from statekeeper.ops.drill.sandbox import RestoredTask
from statekeeper.settings import StatekeeperSettings


def snapshot_age_s(created: datetime, now: datetime) -> float:
    return max(0.0, (now - created).total_seconds())


@dataclass
class ChangelogLag:
    """One changelog partition after a restored marker, read to its end."""

    committed: int = 0  # data records committed by a later marker (before key dedupe)
    committed_keys: int = 0  # distinct keys those commits change
    uncommitted: int = 0  # data records after the last marker (a tail in flight or lost)
    fenced: int = 0  # records and markers of a fenced (older) epoch
    offsets: int = 0  # every offset after the restored marker, to the log end
    head_marker: int | None = None  # offset of the last committing marker (the live head)


@dataclass
class RpoFigures:
    """What :func:`measure_rpo` found: per ``(task, store)`` and the source total."""

    changelogs: dict[tuple[str, str], ChangelogLag]
    source_records_behind: int


class _Lag:
    """A :class:`ChangelogLag` filled from one partition's commits."""

    def __init__(self, where: str, fence: int) -> None:
        self.lag = ChangelogLag()
        self.keys: set[bytes] = set()
        self.splitter = CommitSplitter(where, self._on_commit, fence=fence)

    def _on_commit(
        self, records: dict[bytes, bytes | None], count: int, _: CommitMarker, offset: int
    ) -> None:
        self.lag.committed += count
        self.keys.update(records)
        self.lag.head_marker = offset

    def finish(self, offsets: int) -> ChangelogLag:
        self.lag.committed_keys = len(self.keys)
        self.lag.uncommitted = self.splitter.pending_count
        self.lag.fenced = self.splitter.fenced.total
        self.lag.offsets = offsets
        return self.lag


def changelog_lags(
    consumer_conf: dict[str, Any],
    starts: dict[TP, tuple[int | None, int]],
    timeout_s: float,
) -> dict[TP, ChangelogLag]:
    """Read each changelog partition from just after its restored marker (``(marker offset,
    marker epoch)``; a None offset: from the log start) to its end, sorting what follows
    into commits, an uncommitted tail and fenced records (one consumer for all)."""
    if not starts:
        return {}
    consumer = eof_consumer(consumer_conf, "drill-rpo")
    try:
        lows, highs = watermarks(consumer, list(starts), timeout_s)
        begin = {
            tp: lows[tp] if marker is None else max(marker + 1, lows[tp])
            for tp, (marker, _) in starts.items()
        }
        lags = {tp: _Lag(f"{tp[0]}[{tp[1]}]", epoch) for tp, (_, epoch) in starts.items()}
        assign_at(consumer, begin)
        reader = PartitionReader(consumer, begin, size_hints=highs, timeout_s=timeout_s, keyed=True)
        try:
            for tp, messages, keys in reader:
                lags[tp].splitter.take(messages, keys or [])
        except (ReadStalledError, PartitionFetchError) as exc:
            raise BrokerUnavailableError(f"reading the changelogs' heads: {exc}") from exc
        return {tp: lag.finish(reader.positions[tp] - begin[tp]) for tp, lag in lags.items()}
    finally:
        consumer.close()


def measure_rpo(
    settings: StatekeeperSettings, topology: Any, tasks: list[RestoredTask]
) -> RpoFigures:
    """The RPO figures of the restored ``tasks`` (see the module docstring)."""
    app = settings.application_id
    conf = consumer_config(settings.bootstrap_servers)
    changelogs: dict[tuple[str, str], TP] = {}
    starts: dict[TP, tuple[int | None, int]] = {}
    for t in tasks:
        for name, s in t.stores.items():
            if s.spec.logging_enabled:
                tp = (changelog_topic(app, name), t.partition)
                changelogs[(t.task_id, name)] = tp
                starts[tp] = (s.metadata.changelog_offset, s.metadata.epoch)
    lags = changelog_lags(conf, starts, settings.broker_timeout_s)
    sources = {
        (topic, t.partition): t
        for t in tasks
        for topic in topology.subtopology_topics(app, t.subtopology)
    }
    ends = log_end_offsets(conf, list(sources), settings.broker_timeout_s)
    source_behind = 0
    for (topic, partition), task in sources.items():
        done = task.source_offsets.get(tp_key(topic, partition))
        if done is not None:
            source_behind += max(0, ends[(topic, partition)] - done)
        else:
            source_behind += ends[(topic, partition)]  # never processed: all of it (from 0)
    return RpoFigures({key: lags[tp] for key, tp in changelogs.items()}, source_behind)
