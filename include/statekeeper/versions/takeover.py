"""Where a new version takes over from the old one: ``<state_dir>/<new app>/takeover.json``.

A migration writes the new version's stores at the old version's last commits, under a new
application id (a new Spark checkpoint, new repartition topics). For the new version to
continue exactly where the old one stopped, without a record lost or applied twice, its first
start needs four facts that its own state cannot give it:

- ``batch_base``: above every batch id the old version used. The new query numbers its
  batches from 0; the app adds this base to every Spark batch id, so commit markers, replays
  and the ``sk.batch`` dedupe headers keep growing across the versions.
- ``start_offsets``: where the new query's source starts, per source partition: the lowest
  floor below.
- ``floors``: per subtopology, per source partition, the first offset its tasks process. A
  subtopology without migrated state (stateless, or new) takes over where the old version's
  last committed micro-batch ended: the records before went through the old version's
  subtopology already (its repartition records are carried, below). A migrated task skips
  below its commit markers anyway.
- ``carried``: the old version's repartition records that its downstream tasks had not
  committed yet. The new downstream tasks read them (from the old topic, once, in the first
  micro-batch) as if from the new repartition topic; only records of the old version's
  committed micro-batches (``sk.batch`` at most ``max_batch``) count: later ones come from
  source records the new version reads again itself.

The app copies the file into its Spark checkpoint directory at the first start
(:mod:`statekeeper.app.takeover_start`), so restarts keep using it; a later migration's file
in the state root does not change a running version's numbering.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.atomic_file import replace_text
from statekeeper.errors import StatekeeperError
from statekeeper.kafka.model import OffsetRange

TAKEOVER_FILE = "takeover.json"
FORMAT = 1


class TakeoverError(StatekeeperError):
    """A takeover record that cannot be read, or a takeover that cannot be planned."""


@dataclass(frozen=True)
class CarriedTopic:
    """An old repartition topic whose unconsumed records the new version reads once.

    ``ranges`` per partition ``[start, end)``: from the lowest offset the new downstream
    tasks' migrated markers did not cover to the topic's end when the takeover was planned.
    ``max_batch``: the old version's last committed micro-batch; records of later batches
    are dropped. ``fan_out``: the new topic's partition count when it differs from the old
    one's (the state was re-keyed, :mod:`statekeeper.migration.rekey`): every old partition
    goes to every new task, which keeps the records whose key it holds; None otherwise (old
    partition ``p`` goes to task ``p``)."""

    old_topic: str
    new_topic: str
    max_batch: int
    ranges: dict[int, tuple[int, int]]
    fan_out: int | None = None

    def offset_ranges(self) -> list[OffsetRange]:
        return [
            OffsetRange(self.old_topic, p, start, end)
            for p, (start, end) in sorted(self.ranges.items())
            if end > start
        ]


@dataclass(frozen=True)
class Takeover:
    """The facts a new version's first start takes over with (module docstring)."""

    from_application_id: str
    batch_base: int
    start_offsets: dict[str, dict[int, int]]
    floors: dict[int, dict[str, dict[int, int]]]
    carried: tuple[CarriedTopic, ...] = ()
    notes: tuple[str, ...] = ()
    planned_at_ms: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    # -- what the app asks ---------------------------------------------------------------

    def starting_offsets_json(self) -> str:
        """``startingOffsets`` for the new query (sorted JSON, as Spark compares it)."""
        return json.dumps(
            {
                topic: {str(p): o for p, o in sorted(parts.items())}
                for topic, parts in sorted(self.start_offsets.items())
            },
            separators=(",", ":"),
        )

    def floor(self, subtopology: int, topic: str, partition: int) -> int | None:
        return self.floors.get(subtopology, {}).get(topic, {}).get(partition)

    def carried_ranges(self) -> list[OffsetRange]:
        return [r for c in self.carried for r in c.offset_ranges()]

    def fan_out(self, topic: str) -> int | None:
        """How many new tasks an old carried topic's ranges go to (None: one each)."""
        return next((c.fan_out for c in self.carried if c.old_topic == topic), None)

    def alias(self, topic: str) -> str:
        """The new topic an old carried topic feeds (``topic`` itself otherwise)."""
        for c in self.carried:
            if c.old_topic == topic:
                return c.new_topic
        return topic

    # -- JSON ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "from_application_id": self.from_application_id,
            "batch_base": self.batch_base,
            "start_offsets": _str_keys(self.start_offsets),
            "floors": {str(sub): _str_keys(topics) for sub, topics in sorted(self.floors.items())},
            "carried": [
                {
                    "old_topic": c.old_topic,
                    "new_topic": c.new_topic,
                    "max_batch": c.max_batch,
                    "ranges": {str(p): list(r) for p, r in sorted(c.ranges.items())},
                    "fan_out": c.fan_out,
                }
                for c in self.carried
            ],
            "notes": list(self.notes),
            "planned_at_ms": self.planned_at_ms,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, data: Any, where: str = "takeover") -> Takeover:
        try:
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {FORMAT}")
            return cls(
                from_application_id=str(data["from_application_id"]),
                batch_base=int(data["batch_base"]),
                start_offsets=_int_keys(data["start_offsets"]),
                floors={int(s): _int_keys(t) for s, t in data["floors"].items()},
                carried=tuple(
                    CarriedTopic(
                        str(c["old_topic"]),
                        str(c["new_topic"]),
                        int(c["max_batch"]),
                        {int(p): (int(r[0]), int(r[1])) for p, r in c["ranges"].items()},
                        None if c.get("fan_out") is None else int(c["fan_out"]),
                    )
                    for c in data["carried"]
                ),
                notes=tuple(str(n) for n in data.get("notes", [])),
                planned_at_ms=int(data.get("planned_at_ms", 0)),
                extra=dict(data.get("extra") or {}),
            )
        except (AttributeError, KeyError, TypeError, ValueError, IndexError) as exc:
            raise TakeoverError(f"{where} is not a takeover record: {exc}") from None


def takeover_path(root: Path) -> Path:
    return Path(root) / TAKEOVER_FILE


def read_takeover(path: Path) -> Takeover | None:
    """The record at ``path``, None when there is none; unreadable → :class:`TakeoverError`."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise TakeoverError(f"{path} cannot be read: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TakeoverError(f"{path} is not JSON: {exc}") from None
    return Takeover.from_dict(data, str(path))


def write_takeover(path: Path, takeover: Takeover) -> Path:
    """Write ``takeover`` at ``path`` atomically (a reader sees the old file or the new)."""
    text = json.dumps(takeover.to_dict(), indent=1, sort_keys=True) + "\n"
    return replace_text(path, text, durable=True)


def _str_keys(offsets: dict[str, dict[int, int]]) -> dict[str, dict[str, int]]:
    return {t: {str(p): o for p, o in sorted(ps.items())} for t, ps in sorted(offsets.items())}


def _int_keys(offsets: Any) -> dict[str, dict[int, int]]:
    return {str(t): {int(p): int(o) for p, o in ps.items()} for t, ps in offsets.items()}
