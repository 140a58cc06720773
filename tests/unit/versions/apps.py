"""Versions of one small app for the upgrade tests: words of lines counted per word (store
``counts``) and per word and minute (window store ``per-minute``), built with the DSL."""

from __future__ import annotations

from dataclasses import dataclass

from statekeeper.processing.dsl import Grouped, Materialized, StreamsBuilder
from statekeeper.processing.topology import Topology
from statekeeper.stores.time_windows import TimeWindows
from statekeeper.versions import TopologyFingerprint, fingerprint_of

APP = "wc"


@dataclass(frozen=True)
class Version:
    """What one version of the app does; each field is one kind of change."""

    counts_value_serde: str = "int"
    counts_key_serde: str = "str"
    counts_store_type: str = "rocksdb"
    counts_capacity: int | None = None  # an LRU store's
    counts_read_cache: int | None = None  # None: the default
    counts_changelog_configs: tuple[tuple[str, str], ...] = ()
    counts_logging: bool = True
    counts_caching: int = 0
    window_ms: int = 60_000
    grace_ms: int = 0
    retention_ms: int = 120_000
    per_minute: bool = True
    lengths: bool = False  # a third store
    filter_first: bool = False  # a node added upstream of everything
    named: bool = True  # explicit store and grouping names
    grouping: str = "words"  # the grouping's name (its repartition topic), when named
    other_stream_first: bool = False  # a stateful stream built before the others


def build(version: Version) -> Topology:
    b = StreamsBuilder()
    if version.other_stream_first:
        b.stream("clicks").group_by_key(Grouped.as_("clicks")).count(Materialized.as_("clicks"))
    lines = b.stream("lines", key_serde="bytes", value_serde="str")
    if version.filter_first:
        lines = lines.filter(lambda _k, line: bool(line))
    grouped = lines.flat_map_values(str.split).group_by(
        lambda _k, word: word, Grouped.as_(version.grouping) if version.named else None
    )
    counts = Materialized.as_("counts") if version.named else Materialized()
    counts = counts.with_serdes(version.counts_key_serde, version.counts_value_serde)
    counts = counts.with_store_type(
        version.counts_store_type,  # type: ignore[arg-type]
        version.counts_capacity,
    )
    if version.counts_read_cache is not None:
        counts = counts.with_read_cache(version.counts_read_cache)
    if version.counts_changelog_configs:
        counts = counts.with_logging_enabled(dict(version.counts_changelog_configs))
    if not version.counts_logging:
        counts = counts.with_logging_disabled()
    if version.counts_caching:
        counts = counts.with_caching_enabled(version.counts_caching)
    grouped.reduce(lambda total, word: total + word, counts)
    if version.per_minute:
        windowed = Materialized.as_("per-minute") if version.named else Materialized()
        windows = TimeWindows.tumbling(version.window_ms, grace_ms=version.grace_ms)
        grouped.windowed_by(windows).count(windowed.with_retention(version.retention_ms))
    if version.lengths:
        lengths = Materialized.as_("lengths") if version.named else Materialized()
        grouped.aggregate(lambda: 0, lambda _w, word, n: n + len(word), lengths)
    return b.build()


def fingerprint(version: Version, partitions: int | None = 4) -> TopologyFingerprint:
    counts = None if partitions is None else {"lines": partitions, "clicks": partitions}
    return fingerprint_of(build(version), APP, counts)


def build_version(**fields: object) -> Topology:
    """``build(Version(**fields))``: what an app spec's ``topology:`` names (its ``params:``
    are the fields)."""
    return build(Version(**fields))  # type: ignore[arg-type]
