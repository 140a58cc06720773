"""Offset planning for the Kafka sources: option parsing, offset JSON, admission control.

Pure functions (no broker, no Spark), shared by the row source and the ranges source:
- :func:`parse_source_options` turns the (lower-cased) Spark options into
  :class:`SourceOptions`;
- :class:`OffsetSpec` is ``startingOffsets`` / ``endingOffsets``: ``earliest``, ``latest`` or
  JSON ``{"topic": {"0": 12, "1": -2}}`` where -2 means earliest and -1 latest, as in Spark;
- :func:`offsets_to_dict` / :func:`offsets_from_dict` convert between ``{(topic, partition):
  offset}`` and Spark's offset dict. Spark compares offsets as JSON text, so the dict is
  always built in sorted order (topic, then partition number);
- :func:`plan_batch_end` is admission control: how far each partition may advance in one
  micro-batch under ``maxRecordsPerBatch``;
- :func:`cap_offsets` caps end offsets at ``stopAtOffsets`` (a bounded stream: a backfill).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from statekeeper.errors import ConfigError

TP = tuple[str, int]

EARLIEST = -2
LATEST = -1

BOOTSTRAP_OPTION = "kafka.bootstrap.servers"
DEFAULT_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class OffsetSpec:
    """``earliest``, ``latest`` or explicit offsets per partition (-2/-1 allowed inside)."""

    kind: Literal["earliest", "latest", "offsets"]
    offsets: dict[TP, int] = field(default_factory=dict)

    def resolve(
        self, partitions: Iterable[TP], earliest: Mapping[TP, int], latest: Mapping[TP, int]
    ) -> dict[TP, int]:
        """Concrete offsets for ``partitions``; a partition absent from explicit JSON offsets
        gets ``earliest`` (like Spark for partitions that appear later)."""
        resolved: dict[TP, int] = {}
        for tp in partitions:
            if self.kind == "earliest":
                value = EARLIEST
            elif self.kind == "latest":
                value = LATEST
            else:
                value = self.offsets.get(tp, EARLIEST)
            if value == EARLIEST:
                value = earliest[tp]
            elif value == LATEST:
                value = latest[tp]
            resolved[tp] = value
        return resolved


def parse_offset_spec(text: str | None, option: str, default: str) -> OffsetSpec:
    """Parse ``earliest`` | ``latest`` | JSON; ``option`` names the option in errors."""
    raw = (text if text is not None else default).strip()
    if raw.lower() in ("earliest", "latest"):
        return OffsetSpec(raw.lower())  # type: ignore[arg-type]
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"option {option!r}: expected 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 12}}}}, got {raw!r} ({exc.msg})'
        ) from None
    return OffsetSpec("offsets", offsets_from_dict(data, option))


def offsets_from_dict(data: Any, option: str = "offset") -> dict[TP, int]:
    """``{"topic": {"0": 12}}`` → ``{("topic", 0): 12}``, validating every entry."""
    if not isinstance(data, dict):
        raise ConfigError(f"option {option!r}: expected a JSON object of topics, got {data!r}")
    offsets: dict[TP, int] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise ConfigError(
                f"option {option!r}: topic {topic!r} must map partition numbers to offsets, "
                f"got {parts!r}"
            )
        for part, offset in parts.items():
            try:
                partition = int(part)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"option {option!r}: partition {part!r} of topic {topic!r} is not a number"
                ) from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise ConfigError(
                    f"option {option!r}: offset of {topic}[{partition}] must be an integer >= 0 "
                    f"(or -2 earliest, -1 latest), got {offset!r}"
                )
            offsets[(str(topic), partition)] = offset
    return offsets


def offsets_to_dict(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """``{("t", 0): 12}`` → ``{"t": {"0": 12}}`` in sorted order (stable JSON text)."""
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def offsets_to_json(offsets: Mapping[TP, int]) -> str:
    """Sorted, compact JSON of :func:`offsets_to_dict`."""
    return json.dumps(offsets_to_dict(offsets), separators=(",", ":"))


def plan_batch_end(
    start: Mapping[TP, int], available_end: Mapping[TP, int], max_records: int | None
) -> dict[TP, int]:
    """End offsets of the next batch: everything available, or at most ``max_records``.

    The budget is shared fairly (water-filling): every partition with data gets an equal
    share, a partition needing less than its share gives the rest back to the others, and
    the remainder of the integer division goes to the partitions with the largest backlog.
    If ``max_records`` is at least the number of partitions with data, each of them
    advances; otherwise the ``max_records`` partitions with the largest backlog advance by
    one, so every partition still progresses over successive batches. The total never
    exceeds ``max_records``. The result has exactly the partitions of ``start`` (give a new
    partition its start offset first); a partition missing from ``available_end`` or with
    an end below its start gets no data (the caller decides whether that is data loss).
    """
    if max_records is not None and max_records < 0:
        raise ValueError(f"max_records must be >= 0, got {max_records}")
    backlog = {tp: max(0, available_end.get(tp, start[tp]) - start[tp]) for tp in start}
    total = sum(backlog.values())
    if max_records is None or total <= max_records:
        return {tp: start[tp] + backlog[tp] for tp in start}
    take = dict.fromkeys(start, 0)
    active = sorted(tp for tp, n in backlog.items() if n > 0)
    remaining = max_records
    while active and remaining > 0:
        share = remaining // len(active)
        if share == 0:
            by_backlog = sorted(active, key=lambda tp: (-(backlog[tp] - take[tp]), tp))
            for tp in by_backlog[:remaining]:
                take[tp] += 1
            break
        still_active = []
        for tp in active:
            give = min(share, backlog[tp] - take[tp])
            take[tp] += give
            remaining -= give
            if take[tp] < backlog[tp]:
                still_active.append(tp)
        active = still_active
    return {tp: start[tp] + take[tp] for tp in start}


def cap_offsets(ends: Mapping[TP, int], stop_at: Mapping[TP, int] | None) -> dict[TP, int]:
    """``ends`` with every partition named in ``stop_at`` capped at its stop offset (the
    others as they are): what a bounded stream may read at most."""
    if not stop_at:
        return dict(ends)
    return {tp: min(end, stop_at[tp]) if tp in stop_at else end for tp, end in ends.items()}


@dataclass(frozen=True)
class SourceOptions:
    """Options of the ``statekeeper_kafka`` and ``statekeeper_kafka_ranges`` sources.

    Attributes:
        bootstrap: ``kafka.bootstrap.servers``.
        topics: ``subscribe``, comma separated, in the given order without duplicates.
        starting: ``startingOffsets`` (default ``latest`` for streams, ``earliest`` for batch).
        ending: ``endingOffsets`` (batch only; default ``latest``).
        max_records_per_batch: ``maxRecordsPerBatch`` (alias ``maxOffsetsPerTrigger``, as in
            Spark's Kafka source): streaming admission control.
        timeout_s: ``timeoutSeconds``: broker requests and reads without progress.
        kafka_overrides: every other ``kafka.*`` option, as librdkafka consumer settings.
        stop_at: ``stopAtOffsets`` (streams only; JSON like ``startingOffsets``, offsets >= 0):
            no micro-batch reads a named partition past its offset, so the stream runs dry
            there (a bounded run: ``statekeeper backfill``). Unnamed partitions are not capped.
        batch_limit_file: ``batchLimitFile`` (streams only): a file whose limit, when lower,
            replaces ``max_records_per_batch`` for the next micro-batch (adaptive batches,
            :mod:`statekeeper.spark.batch_limit`).
    """

    bootstrap: str
    topics: tuple[str, ...]
    starting: OffsetSpec
    ending: OffsetSpec
    max_records_per_batch: int | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    kafka_overrides: dict[str, str] = field(default_factory=dict)
    stop_at: dict[TP, int] | None = None
    batch_limit_file: str | None = None


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Validate the source options (keys compared lower-cased, as Spark passes them)."""
    opts = {str(k).lower(): v for k, v in options.items()}
    bootstrap = (opts.get(BOOTSTRAP_OPTION) or "").strip()
    if not bootstrap:
        raise ConfigError(
            f"option {BOOTSTRAP_OPTION!r} is required, e.g. "
            f".option('{BOOTSTRAP_OPTION}', '127.0.0.1:9092')"
        )
    if "assign" in opts or "subscribepattern" in opts:
        raise ConfigError(
            "options 'assign' and 'subscribePattern' are not supported: use 'subscribe' with "
            "a comma-separated list of topics"
        )
    topics = tuple(dict.fromkeys(t.strip() for t in (opts.get("subscribe") or "").split(",")))
    topics = tuple(t for t in topics if t)
    if not topics:
        raise ConfigError("option 'subscribe' is required: a comma-separated list of topics")
    starting = parse_offset_spec(
        opts.get("startingoffsets"), "startingOffsets", "latest" if streaming else "earliest"
    )
    ending = parse_offset_spec(opts.get("endingoffsets"), "endingOffsets", "latest")
    if streaming and "endingoffsets" in opts:
        raise ConfigError("option 'endingOffsets' is for batch queries only (spark.read)")
    if not streaming:
        _check_batch_bounds(starting, ending)
    stop_at = _stop_at(opts, streaming)
    limit_file = (opts.get("batchlimitfile") or "").strip() or None
    if limit_file is not None and not streaming:
        raise ConfigError("option 'batchLimitFile' is for streaming queries only")
    for spec, option in (
        (starting, "startingOffsets"),
        (ending, "endingOffsets"),
        (OffsetSpec("offsets", stop_at or {}), "stopAtOffsets"),
    ):
        unknown = sorted({t for t, _ in spec.offsets} - set(topics))
        if unknown:
            raise ConfigError(
                f"option {option!r} names topic(s) {', '.join(unknown)} that are not in "
                f"'subscribe' ({', '.join(topics)})"
            )
    return SourceOptions(
        bootstrap=bootstrap,
        topics=topics,
        starting=starting,
        ending=ending,
        max_records_per_batch=_positive_int(opts, "maxrecordsperbatch", "maxRecordsPerBatch")
        # Spark's JVM Kafka source calls it maxOffsetsPerTrigger.
        or _positive_int(opts, "maxoffsetspertrigger", "maxOffsetsPerTrigger"),
        timeout_s=_positive_float(opts, "timeoutseconds", "timeoutSeconds", DEFAULT_TIMEOUT_S),
        kafka_overrides={
            key[len("kafka.") :]: value
            for key, value in sorted(opts.items())
            if key.startswith("kafka.") and key != BOOTSTRAP_OPTION
        },
        stop_at=stop_at,
        batch_limit_file=limit_file,
    )


def _stop_at(opts: Mapping[str, str], streaming: bool) -> dict[TP, int] | None:
    raw = opts.get("stopatoffsets")
    if raw is None or not str(raw).strip():
        return None
    if not streaming:
        raise ConfigError(
            "option 'stopAtOffsets' is for streaming queries only (batch queries: endingOffsets)"
        )
    spec = parse_offset_spec(str(raw), "stopAtOffsets", "latest")
    if spec.kind != "offsets":
        raise ConfigError(
            f'option \'stopAtOffsets\': expected JSON like {{"topic": {{"0": 12}}}}, got {raw!r}'
        )
    negative = sorted(tp for tp, offset in spec.offsets.items() if offset < 0)
    if negative:
        topic, partition = negative[0]
        raise ConfigError(
            f"option 'stopAtOffsets': offset of {topic}[{partition}] must be >= 0, got "
            f"{spec.offsets[negative[0]]}"
        )
    return spec.offsets


def _check_batch_bounds(starting: OffsetSpec, ending: OffsetSpec) -> None:
    # As in Spark: a batch query cannot start at "latest" nor end at "earliest".
    if starting.kind == "latest" or LATEST in starting.offsets.values():
        raise ConfigError(
            "option 'startingOffsets': 'latest' (-1) is not allowed in a batch query; use "
            "'earliest' or explicit offsets"
        )
    if ending.kind == "earliest" or EARLIEST in ending.offsets.values():
        raise ConfigError(
            "option 'endingOffsets': 'earliest' (-2) is not allowed in a batch query; use "
            "'latest' or explicit offsets"
        )


def _positive_int(opts: Mapping[str, str], key: str, name: str) -> int | None:
    raw = opts.get(key)
    if raw is None or str(raw).strip() == "":
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"option {name!r} must be a positive integer, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"option {name!r} must be a positive integer, got {raw!r}")
    return value


def _positive_float(opts: Mapping[str, str], key: str, name: str, default: float) -> float:
    raw = opts.get(key)
    if raw is None or str(raw).strip() == "":
        return default
    try:
        value = float(str(raw).strip())
    except ValueError:
        raise ConfigError(f"option {name!r} must be a positive number, got {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"option {name!r} must be a positive number, got {raw!r}")
    return value
