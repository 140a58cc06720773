"""Diffing a shadow run's outputs: the latest value per key of each output topic of the new
version against the old version's counterpart, once both have processed the same input.

Outputs are at-least-once keyed updates, so a version's output is what a consumer of the
topic ends up with: per key, the last record (by offset in its partition; a key found in
several partitions: the newest timestamp), records of fenced writers left out (``sk.epoch``,
docs/fencing.md). A record without ``sk.*`` headers (written by someone else) counts like
any other: a consumer sees it too. Keyless records cannot be compared per key and are
counted apart.

Which topics: every output topic of the new topology named by a topology param that, in
the old spec's params, names an output topic of the old topology (word_count:
``output_topic``), and every topic the new spec declares under ``outputs:``. Which keys: the
new version writes only from its takeover on, so the keys it wrote, and the keys the old
version wrote in micro-batches from the takeover's ``batch_base`` on (input both versions
processed), with the old version's latest value over its whole topic. Per key:

- ``equal``: the same latest value (tombstones included);
- ``expected-different``: with ``outputs.<name>.store``, the old value migrated by that
  store's migration (``migrations.<store>``; copied as it is without one) is the new value,
  or the store's ``migrations.<store>.compare`` says the difference is expected; or the
  topic's own ``outputs.<name>.compare(key, old, new)`` (``old`` migrated when a store is
  named) says so;
- ``unexpected``: anything else, and a key missing on either side (a few are listed).

An operator read: the topics are read with an assigned consumer from their log start to
their end; nothing is committed, created or written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from statekeeper.errors import ConfigError
from statekeeper.kafka.model import KafkaRecord
from statekeeper.migration.functions import StoreCounts, StoreMigration, migrated_entries
from statekeeper.processing.output_headers import (
    BATCH,
    EpochFence,
    dedupe_id,
    record_epoch,
)
from statekeeper.stores.serdes import serde_for

#: Unexpected keys listed per topic (all are counted).
EXAMPLES = 5


class _Absent:
    """A key a version never wrote (a tombstone is a value: None)."""

    def __repr__(self) -> str:
        return "<absent>"


ABSENT: Any = _Absent()

#: ``expected(key, old, new) -> bool``.
Compare = Callable[[Any, Any, Any], bool]


@dataclass(frozen=True)
class OutputPair:
    """One output topic of each version, compared; ``name``: the param (or topic) naming
    the new one; ``store``: whose values the topic carries (``outputs.<name>.store``)."""

    name: str
    old_topic: str
    new_topic: str
    store: str | None = None
    compare: str | None = None


@dataclass
class TopicDiff:
    """One pair of topics: counts per verdict, a few unexpected keys, what was read."""

    name: str
    old_topic: str
    new_topic: str
    rule: str
    equal: int = 0
    expected_different: int = 0
    unexpected: int = 0
    examples: list[str] = field(default_factory=list)
    old_keys: int = 0
    new_keys: int = 0
    keyless: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "old_topic": self.old_topic,
            "new_topic": self.new_topic,
            "rule": self.rule,
            "equal": self.equal,
            "expected_different": self.expected_different,
            "unexpected": self.unexpected,
            "examples": list(self.examples),
            "old_keys": self.old_keys,
            "new_keys": self.new_keys,
            "keyless": self.keyless,
        }


@dataclass
class OutputDiffReport:
    """Every compared pair; ``ok`` when no key is unexpected. ``notes``: output topics not
    compared, and why."""

    topics: list[TopicDiff] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(t.unexpected == 0 for t in self.topics)

    def totals(self) -> dict[str, int]:
        return {
            "equal": sum(t.equal for t in self.topics),
            "expected_different": sum(t.expected_different for t in self.topics),
            "unexpected": sum(t.unexpected for t in self.topics),
            "topics": len(self.topics),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "totals": self.totals(),
            "topics": [t.as_dict() for t in self.topics],
            "notes": list(self.notes),
        }


# -- which topics ----------------------------------------------------------------------------


def output_pairs(
    old_spec: Any,
    new_spec: Any,
    old_topology: Any,
    new_topology: Any,
    old_app: str,
    new_app: str,
) -> tuple[list[OutputPair], list[str]]:
    """The pairs of output topics to compare and notes on the ones left out (module
    docstring). A declared ``outputs.<name>`` that names no output topic of either version,
    or a store the new topology does not have, raises ConfigError."""
    old_outputs = set(old_topology.output_topics(old_app))
    new_outputs = set(new_topology.output_topics(new_app))
    pairs: list[OutputPair] = []
    names = [*new_spec.outputs, *(p for p in new_spec.params if p not in new_spec.outputs)]
    for name in names:
        declared = new_spec.outputs.get(name)
        new_topic = _named_topic(new_spec.params, name, new_outputs)
        old_name = (declared.from_ if declared is not None else None) or name
        old_topic = _named_topic(old_spec.params, old_name, old_outputs)
        if declared is not None:
            if new_topic is None or old_topic is None:
                version, named = ("new", name) if new_topic is None else ("old", old_name)
                where = new_spec.where("outputs", name)
                raise ConfigError(
                    f"outputs.{name}{f' ({where})' if where else ''}: {named!r} names no "
                    f"output topic of the {version} version (a topology param naming one, or "
                    "the topic)"
                )
            if declared.store is not None and declared.store not in new_topology.stores:
                raise ConfigError(
                    f"outputs.{name}.store {declared.store!r}: no such store in the new "
                    f"version (stores: {', '.join(sorted(new_topology.stores))})"
                )
        elif new_topic is None or old_topic is None:
            continue
        if old_topic == new_topic:
            continue  # both versions write one topic: their outputs cannot be told apart
        pairs.append(
            OutputPair(
                name,
                old_topic,
                new_topic,
                None if declared is None else declared.store,
                None if declared is None else declared.compare,
            )
        )
    paired = {p.new_topic for p in pairs}
    notes = [
        f"output topic {t} of {new_app} not compared: no topology param names it in both "
        "specs, or both versions write it (declare outputs: in the new spec)"
        for t in sorted(new_outputs - paired)
    ]
    return pairs, notes


def _named_topic(params: Mapping[str, Any], name: str, outputs: set[str]) -> str | None:
    value = params.get(name, name)
    return value if isinstance(value, str) and value in outputs else None


def sink_serdes(topology: Any, app: str, topic: str) -> tuple[Any, Any]:
    """The key and value serdes the topology writes ``topic`` with."""
    for node in topology.nodes.values():
        ref = getattr(node, "topic", None)
        if ref is not None and hasattr(node, "value_serde") and ref.resolve(app) == topic:
            return serde_for(node.key_serde), serde_for(node.value_serde)
    raise ConfigError(f"{app} writes no topic {topic}")


# -- the latest value per key ------------------------------------------------------------------


@dataclass
class LatestOutputs:
    """A topic's latest record per key (raw key), keys of records written from
    ``batch_floor`` on, and the number of keyless records."""

    latest: dict[bytes, KafkaRecord] = field(default_factory=dict)
    since_floor: set[bytes] = field(default_factory=set)
    keyless: int = 0


def latest_per_key(
    partitions: Mapping[int, Iterable[KafkaRecord]], batch_floor: int | None = None
) -> LatestOutputs:
    """Deduplicate a topic's records (``{partition: records in offset order}``) to the
    latest per key (module docstring); ``since_floor``: keys with a record whose ``sk.batch``
    is at least ``batch_floor`` (every key when it is None)."""
    out = LatestOutputs()
    for _partition, records in sorted(partitions.items()):
        fence = EpochFence()
        for record in records:
            rid = dedupe_id(record.headers)
            if rid is not None and not fence.admits(rid[0], record_epoch(record.headers)):
                continue
            if record.key is None:
                out.keyless += 1
                continue
            before = out.latest.get(record.key)
            if (
                before is None
                or before.partition == record.partition
                or record.timestamp_ms >= before.timestamp_ms
            ):
                out.latest[record.key] = record
            if batch_floor is None or _batch(record) >= batch_floor:
                out.since_floor.add(record.key)
    return out


def _batch(record: KafkaRecord) -> int:
    """The record's ``sk.batch``; a record without one (written by someone else) counts as
    written now."""
    raw = next((v for k, v in record.headers if k == BATCH), None)
    try:
        return int(raw) if raw is not None else 1 << 62
    except ValueError:
        return 1 << 62


# -- per key -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ValueRule:
    """How an old value becomes the expected new one, and which differences are expected:
    ``migration`` (None: the value as it is), then ``compares`` in order."""

    migration: StoreMigration | None = None
    compares: tuple[Compare, ...] = ()

    def describe(self, pair: OutputPair) -> str:
        parts = []
        if pair.store is not None:
            how = "migrated" if self.migration is not None else "copied"
            parts.append(f"values of store {pair.store} ({how})")
        if pair.compare is not None:
            parts.append(f"compare {pair.compare.rpartition('/')[2]}")
        return "; ".join(parts) or "equal values"


def classify(
    diff: TopicDiff,
    old: Mapping[Any, Any],
    new: Mapping[Any, Any],
    keys: Iterable[Any],
    rule: ValueRule,
) -> TopicDiff:
    """Count each key of ``keys`` into ``diff``: ``old``/``new`` hold the decoded latest
    values (None: a tombstone; a key not there was never written)."""
    keys = sorted(set(keys), key=repr)
    expected = _expected(old, keys, rule.migration)
    for key in keys:
        before, after = old.get(key, ABSENT), new.get(key, ABSENT)
        if before is ABSENT or after is ABSENT:
            _unexpected(diff, key, before, after, "missing")
            continue
        if before == after:
            diff.equal += 1
            continue
        want = expected.get(key)
        if want == after or any(_expects(c, key, want, after) for c in rule.compares):
            diff.expected_different += 1
            continue
        _unexpected(diff, key, before, after, f"expected {want!r}" if want != before else None)
    return diff


def _expected(
    old: Mapping[Any, Any], keys: list[Any], migration: StoreMigration | None
) -> dict[Any, Any]:
    """Per key the old value migrated (None: a tombstone, or dropped by the migration)."""
    present = [(k, old[k]) for k in keys if old.get(k, ABSENT) is not ABSENT]
    if migration is None:
        return dict(present)
    values = [(k, v) for k, v in present if v is not None]
    migrated = dict(migrated_entries(migration, values, StoreCounts()))
    return {k: migrated.get(k) for k, _ in present}


def _expects(compare: Compare, key: Any, want: Any, after: Any) -> bool:
    try:
        return bool(compare(key, want, after))
    except Exception:  # noqa: BLE001 - a compare that cannot judge a value says no
        return False


def _unexpected(diff: TopicDiff, key: Any, before: Any, after: Any, why: str | None) -> None:
    diff.unexpected += 1
    if len(diff.examples) < EXAMPLES:
        detail = f" ({why})" if why else ""
        diff.examples.append(f"{key!r}: old {before!r}, new {after!r}{detail}")


# -- both versions ------------------------------------------------------------------------------

#: Reads ``{partition: records}`` of a topic.
ReadTopic = Callable[[str], Mapping[int, list[KafkaRecord]]]


def diff_outputs(
    pairs: list[OutputPair],
    read: ReadTopic,
    *,
    old_topology: Any,
    new_topology: Any,
    old_app: str,
    new_app: str,
    rules: Mapping[str, ValueRule],
    batch_floor: int | None,
) -> list[TopicDiff]:
    """Read and compare every pair (module docstring); ``rules`` per pair name,
    ``batch_floor``: the takeover's ``batch_base`` (None: compare every key of the old
    version)."""
    diffs = []
    for pair in pairs:
        rule = rules.get(pair.name, ValueRule())
        old = latest_per_key(read(pair.old_topic), batch_floor)
        new = latest_per_key(read(pair.new_topic))
        old_values = _decoded(old, *sink_serdes(old_topology, old_app, pair.old_topic))
        new_values = _decoded(new, *sink_serdes(new_topology, new_app, pair.new_topic))
        keys_by_raw = {**old_values[1], **new_values[1]}
        domain = {keys_by_raw[raw] for raw in new.latest.keys() | old.since_floor}
        diff = TopicDiff(
            pair.name,
            pair.old_topic,
            pair.new_topic,
            rule.describe(pair),
            old_keys=len(old.latest),
            new_keys=len(new.latest),
            keyless=old.keyless + new.keyless,
        )
        diffs.append(classify(diff, old_values[0], new_values[0], domain, rule))
    return diffs


def _decoded(
    outputs: LatestOutputs, key_serde: Any, value_serde: Any
) -> tuple[dict[Any, Any], dict[bytes, Any]]:
    """``({decoded key: decoded value}, {raw key: decoded key})``; what does not decode is
    kept as its bytes (and then differs)."""
    values: dict[Any, Any] = {}
    keys: dict[bytes, Any] = {}
    for raw, record in outputs.latest.items():
        key = _decode_key(key_serde, raw)
        keys[raw] = key
        values[key] = None if record.value is None else _decode(value_serde, record.value)
    return values, keys


def _decode(serde: Any, raw: bytes) -> Any:
    try:
        return serde.deserialize(raw)
    except Exception:  # noqa: BLE001 - any serde failure: the bytes themselves
        return raw


def _decode_key(serde: Any, raw: bytes) -> Any:
    value = _decode(serde, raw)
    try:
        hash(value)
    except TypeError:
        return _Frozen(value)
    return value


class _Frozen:
    """An unhashable decoded key (a JSON object), compared and hashed by its text."""

    def __init__(self, value: Any) -> None:
        import json

        self.value = value
        self.text = json.dumps(value, sort_keys=True, default=repr)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Frozen) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return self.text
