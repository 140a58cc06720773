"""A backfill's bounds: ``--from`` and ``--until`` parsed and resolved (pure).

- ``--from earliest`` (the default) or ``--from TIMESTAMP_MS``: where a new query starts;
- ``--until now`` (the default: every source partition's log end when the backfill starts)
  or ``--until OFFSETS_JSON`` (``{"topic": {"0": 1200, ...}}``, ``-1`` for "now"): where the
  backfill stops and the stream takes over. A topic the JSON does not name is read to now;
  a topic it names must name every partition.

Parsing needs only the topology's source topics, so a bad value fails before any broker is
asked; :func:`resolve_until` checks the offsets against the partition counts and log ends.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from statekeeper.errors import ConfigError

TP = tuple[str, int]

NOW = -1  # an --until offset: the partition's log end when the backfill starts


@dataclass(frozen=True)
class FromSpec:
    """``--from``: ``earliest`` (timestamp_ms None) or a timestamp in epoch milliseconds."""

    timestamp_ms: int | None = None

    @property
    def label(self) -> str:
        return "earliest" if self.timestamp_ms is None else str(self.timestamp_ms)


@dataclass(frozen=True)
class UntilSpec:
    """``--until``: ``now`` (no offsets) or explicit offsets (``NOW`` allowed inside)."""

    offsets: dict[TP, int] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return "now" if not self.offsets else "offsets"


def parse_from(text: str | None) -> FromSpec:
    """``earliest`` or a timestamp (epoch milliseconds, >= 0)."""
    raw = (text or "earliest").strip()
    if raw.lower() == "earliest":
        return FromSpec()
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(
            f"--from: expected 'earliest' or a timestamp in epoch milliseconds, got {raw!r}"
        ) from None
    if value < 0:
        raise ConfigError(f"--from: a timestamp must be >= 0 ms, got {value}")
    return FromSpec(value)


def parse_until(text: str | None, sources: Iterable[str]) -> UntilSpec:
    """``now`` or JSON offsets of source topics; every bad entry is named."""
    raw = (text or "now").strip()
    if raw.lower() == "now":
        return UntilSpec()
    known = sorted(set(sources))
    try:
        data: Any = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f'--until: expected \'now\' or JSON like {{"topic": {{"0": 1200}}}}, got {raw!r} '
            f"({exc.msg})"
        ) from None
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"--until: expected a JSON object of topics, got {raw!r}")
    offsets: dict[TP, int] = {}
    for topic, parts in data.items():
        if topic not in known:
            raise ConfigError(
                f"--until: topic {topic!r} is not a source of the app (sources: {', '.join(known)})"
            )
        if not isinstance(parts, dict) or not parts:
            raise ConfigError(
                f"--until: topic {topic!r} must map partition numbers to offsets, got {parts!r}"
            )
        for part, offset in parts.items():
            try:
                partition = int(part)
            except (TypeError, ValueError):
                partition = -1
            if partition < 0:
                raise ConfigError(f"--until: partition {part!r} of {topic} is not a number >= 0")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < NOW:
                raise ConfigError(
                    f"--until: offset of {topic}[{partition}] must be an integer >= 0 or -1 "
                    f"(now), got {offset!r}"
                )
            offsets[(topic, partition)] = offset
    return UntilSpec(offsets)


def resolve_until(
    spec: UntilSpec, partitions: Mapping[str, int], log_ends: Mapping[TP, int]
) -> dict[TP, int]:
    """Concrete until offsets of every source partition (``partitions``: the source topics'
    partition counts; ``log_ends``: their log ends now). An offset beyond its partition's log
    end is refused: the backfill would wait for records that may never come."""
    named_topics = {topic for topic, _ in spec.offsets}
    for (topic, partition), _ in sorted(spec.offsets.items()):
        if partition >= partitions[topic]:
            raise ConfigError(
                f"--until: {topic}[{partition}] does not exist ({topic} has "
                f"{partitions[topic]} partitions)"
            )
    for topic in sorted(named_topics):
        missing = [p for p in range(partitions[topic]) if (topic, p) not in spec.offsets]
        if missing:
            raise ConfigError(
                f"--until: name every partition of {topic} (it has {partitions[topic]}); "
                f"missing {', '.join(map(str, missing))} (-1 is now)"
            )
    until: dict[TP, int] = {}
    for topic, count in sorted(partitions.items()):
        for partition in range(count):
            tp = (topic, partition)
            end = log_ends[tp]
            offset = spec.offsets.get(tp, NOW)
            if offset == NOW:
                offset = end
            elif offset > end:
                raise ConfigError(
                    f"--until: {topic}[{partition}] at {offset} is beyond its log end {end}"
                )
            until[tp] = offset
    return until


def records_left(until: Mapping[TP, int], positions: Mapping[TP, int]) -> int:
    """Source records still to process below ``until`` (a partition without a position
    counts from 0)."""
    return sum(max(0, end - positions.get(tp, 0)) for tp, end in until.items())
