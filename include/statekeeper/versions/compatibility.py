"""Whether the state one topology wrote can be read by another: a pure comparison of two
fingerprints (:mod:`statekeeper.versions.fingerprint`).

Per store, one :class:`StoreChange`:

* ``unchanged``;
* ``compatible``: the new code reads the state as it is (caching, read cache, changelog
  configs, LRU capacity, grace, retention, logging switched, a logged store moved to another
  subtopology: rebuilt from its changelog);
* ``needs-migration``: the bytes mean something else now (key or value serde, store kind,
  window size), a store without changelog moved to another subtopology, or an internal
  task-state store whose subtopology reads other topics now;
* ``new``: it starts empty (or a backfill fills it); ``dropped``: its state is no longer read.

Per source topic, one :class:`TopicChange`: ``partitions-changed`` (keys move to other
tasks: the state needs repartitioning), ``new``, ``dropped`` or ``unchanged``; repartition
topics are ``new``, ``dropped`` or ``unchanged``. A ``needs-migration`` store or a
``partitions-changed`` source makes the plan incompatible (:attr:`UpgradePlan.compatible`).
Stores and topics whose names the DSL generated carry a note (:mod:`.auto_names`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from statekeeper.versions.auto_names import (
    HINT,
    is_generated_store,
    is_generated_topic,
    shifted_pairs,
)
from statekeeper.versions.fingerprint import StoreFingerprint, TopologyFingerprint


class StoreChange(StrEnum):
    """What happens to one store's state (module docstring)."""

    UNCHANGED = "unchanged"
    COMPATIBLE = "compatible"
    NEEDS_MIGRATION = "needs-migration"
    NEW = "new"
    DROPPED = "dropped"


class TopicChange(StrEnum):
    """What changed about one topic the app reads."""

    UNCHANGED = "unchanged"
    PARTITIONS_CHANGED = "partitions-changed"
    NEW = "new"
    DROPPED = "dropped"


@dataclass(frozen=True)
class StoreVerdict:
    """One store's :class:`StoreChange`; ``detail`` names the difference
    (``value serde json -> msgpack``), ``notes`` add warnings (a generated name)."""

    store: str
    change: StoreChange
    detail: str
    notes: tuple[str, ...] = ()
    internal: bool = False

    @property
    def blocks(self) -> bool:
        """Whether the new code cannot start on this store's state as it is."""
        return self.change is StoreChange.NEEDS_MIGRATION

    @property
    def reason(self) -> str:
        """One line naming the store and the difference."""
        return f"store {self.store}: {self.detail}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "change": str(self.change),
            "reason": self.reason,
            "notes": list(self.notes),
            "internal": self.internal,
        }


@dataclass(frozen=True)
class TopicVerdict:
    """One topic's :class:`TopicChange`; ``role`` is ``source`` or ``repartition``."""

    topic: str
    role: Literal["source", "repartition"]
    change: TopicChange
    detail: str
    notes: tuple[str, ...] = ()

    @property
    def blocks(self) -> bool:
        return self.change is TopicChange.PARTITIONS_CHANGED

    @property
    def reason(self) -> str:
        return f"{self.role} {self.topic}: {self.detail}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "role": self.role,
            "change": str(self.change),
            "reason": self.reason,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class UpgradePlan:
    """Every store's and topic's verdict, stores and topics sorted by name."""

    stores: tuple[StoreVerdict, ...]
    topics: tuple[TopicVerdict, ...]
    old_digest: str
    new_digest: str
    notes: tuple[str, ...] = ()

    @property
    def blocking(self) -> list[StoreVerdict | TopicVerdict]:
        """The verdicts that keep the new code from starting on the old state."""
        return [v for v in (*self.stores, *self.topics) if v.blocks]

    @property
    def compatible(self) -> bool:
        return not self.blocking

    def store(self, name: str) -> StoreVerdict:
        return next(v for v in self.stores if v.store == name)

    def topic(self, name: str) -> TopicVerdict:
        return next(v for v in self.topics if v.topic == name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "compatible": self.compatible,
            "old_digest": self.old_digest,
            "new_digest": self.new_digest,
            "stores": [v.as_dict() for v in self.stores],
            "topics": [v.as_dict() for v in self.topics],
            "notes": list(self.notes),
        }


def compare(old: TopologyFingerprint, new: TopologyFingerprint) -> UpgradePlan:
    """The plan for running ``new`` on the state ``old`` wrote."""
    notes: tuple[str, ...] = ()
    if old.application_id != new.application_id:
        notes = (
            f"application id {old.application_id} -> {new.application_id}: the new app has "
            "its own state root, changelogs and repartition topics",
        )
    return UpgradePlan(
        stores=_store_verdicts(old, new),
        topics=_source_verdicts(old, new) + _repartition_verdicts(old, new),
        old_digest=old.digest,
        new_digest=new.digest,
        notes=notes,
    )


# -- stores -----------------------------------------------------------------------------------


def _store_verdicts(old: TopologyFingerprint, new: TopologyFingerprint) -> tuple[StoreVerdict, ...]:
    old_names = [s.name for s in old.stores]
    new_names = [s.name for s in new.stores]
    shifted = shifted_pairs(
        [n for n in old_names if is_generated_store(n)],
        [n for n in new_names if is_generated_store(n)],
    )
    renamed_to = {old_name: new_name for new_name, old_name in shifted.items()}
    verdicts = []
    for name in sorted(set(old_names) | set(new_names)):
        before, after = old.store(name), new.store(name)
        notes = [HINT] if is_generated_store(name) else []
        if before is None:
            assert after is not None
            if name in shifted:
                notes.append(
                    f"probably {shifted[name]} renamed by the counter: its state is not read"
                )
            verdicts.append(
                StoreVerdict(name, StoreChange.NEW, _new(after), tuple(notes), after.internal)
            )
        elif after is None:
            if name in renamed_to:
                notes.append(f"probably renamed to {renamed_to[name]} by the counter")
            verdicts.append(
                StoreVerdict(
                    name, StoreChange.DROPPED, _dropped(before), tuple(notes), before.internal
                )
            )
        else:
            change, detail = _changed(before, after, old, new)
            verdicts.append(StoreVerdict(name, change, detail, tuple(notes), after.internal))
    return tuple(verdicts)


def _new(store: StoreFingerprint) -> str:
    if store.internal:
        return f"new (subtopology {store.subtopology}'s task state starts empty)"
    return "new: it starts empty, or a backfill (reprocessing its input) fills it"


def _dropped(store: StoreFingerprint) -> str:
    where = "its local copies"
    if store.logging:
        where += f" and changelog {store.changelog_topic}"
    return f"dropped: {where} are no longer read (delete them once sure)"


#: What differs about one store: (what needs a migration, what only tunes it).
Differences = tuple[list[str], list[str]]


def _changed(
    before: StoreFingerprint,
    after: StoreFingerprint,
    old: TopologyFingerprint,
    new: TopologyFingerprint,
) -> tuple[StoreChange, str]:
    migrations: list[str] = []
    tunings: list[str] = []
    for found_migrations, found_tunings in (
        _contents(before, after),
        _window(before, after),
        _moves(before, after, old, new),
        _logging(before, after, old.application_id, new.application_id),
        ([], _tuning(before, after)),
    ):
        migrations += found_migrations
        tunings += found_tunings
    if migrations:
        return StoreChange.NEEDS_MIGRATION, "; ".join(migrations + tunings)
    if tunings:
        return StoreChange.COMPATIBLE, "; ".join(tunings)
    return StoreChange.UNCHANGED, "unchanged"


def _contents(before: StoreFingerprint, after: StoreFingerprint) -> Differences:
    """How the stored bytes are laid out: the kind and the serdes."""
    migrations = []
    if (before.kind, before.persistent, before.engine) != (
        after.kind,
        after.persistent,
        after.engine,
    ):
        migrations.append(f"kind {_kind(before)} -> {_kind(after)}")
    if before.key_serde != after.key_serde:
        migrations.append(f"key serde {before.key_serde} -> {after.key_serde}")
    if before.value_serde != after.value_serde:
        migrations.append(f"value serde {before.value_serde} -> {after.value_serde}")
    return migrations, []


def _kind(store: StoreFingerprint) -> str:
    if store.engine is not None:  # a custom engine (docs/custom-stores.md)
        return f"{store.kind} ({store.engine})"
    if store.kind == "window" and not store.persistent:
        return "window (in-memory)"
    return store.kind


def _window(before: StoreFingerprint, after: StoreFingerprint) -> Differences:
    """Window size (what a window key means), grace and retention (how long windows stay)."""
    if before.window is None or after.window is None:
        return [], []  # a kind change, said by _contents
    b, a = before.window, after.window
    migrations, tunings = [], []
    if b.size_ms != a.size_ms:
        migrations.append(f"window size {b.size_ms} -> {a.size_ms} ms")
    if b.grace_ms != a.grace_ms:
        tunings.append(f"grace {b.grace_ms} -> {a.grace_ms} ms")
    if b.retention_ms < a.retention_ms:
        tunings.append(f"retention {b.retention_ms} -> {a.retention_ms} ms")
    elif b.retention_ms > a.retention_ms:
        tunings.append(
            f"retention {b.retention_ms} -> {a.retention_ms} ms (older windows are dropped)"
        )
    return migrations, tunings


def _moves(
    before: StoreFingerprint,
    after: StoreFingerprint,
    old: TopologyFingerprint,
    new: TopologyFingerprint,
) -> Differences:
    """A store whose tasks change: another subtopology, or (an internal task-state store,
    named after its subtopology) a subtopology that reads other topics now."""
    if after.internal:
        was, now = old.subtopology(before.subtopology), new.subtopology(after.subtopology)
        read = list(was.source_topics) if was is not None else []
        reads = list(now.source_topics) if now is not None else []
        if read == reads:
            return [], []
        return [
            f"subtopology {after.subtopology} read {read}, now reads {reads}: its stream "
            "time, punctuation times and dedupe positions are another subtopology's "
            "(subtopologies are numbered in the order their first node is built: add new "
            "streams after the existing ones)"
        ], []
    if before.subtopology == after.subtopology:
        return [], []
    moved = f"moves from subtopology {before.subtopology} to {after.subtopology}"
    if not after.logging:
        return [
            f"{moved} and has no changelog: tasks {after.subtopology}_* would start it empty"
        ], []
    return [], [
        f"{moved}: tasks {after.subtopology}_* rebuild it from its changelog (local copies "
        f"and snapshots of tasks {before.subtopology}_* are not used)"
    ]


def _logging(
    before: StoreFingerprint, after: StoreFingerprint, old_app: str, new_app: str
) -> Differences:
    """The store's changelog: switched on or off, or another topic (a new application id
    renames every changelog: ``<app>-<store>-changelog`` under either id is the same)."""
    if before.logging and not after.logging:
        return [], ["logging on -> off (a lost local copy can no longer be restored)"]
    if after.logging and not before.logging:
        return [], [
            "logging off -> on (the new changelog holds only what is written from now on: a "
            "restore before every key is written again loses the rest)"
        ]
    if _as_app(before.changelog_topic, old_app, new_app) != after.changelog_topic:
        return [f"changelog {before.changelog_topic} -> {after.changelog_topic}"], []
    return [], []


def _tuning(before: StoreFingerprint, after: StoreFingerprint) -> list[str]:
    """Config that changes how the store runs, not what it holds."""
    pairs = [
        ("capacity", before.capacity, after.capacity),
        ("caching", before.caching_max_bytes, after.caching_max_bytes),
        ("changelog configs", before.topic_configs, after.topic_configs),
    ]
    if before.kind == after.kind:  # another kind has no read cache: the kind change says it
        pairs.append(("read cache", before.read_cache_max_bytes, after.read_cache_max_bytes))
    return [f"{label} {b} -> {a}" for label, b, a in pairs if b != a]


# -- topics -----------------------------------------------------------------------------------


def _source_verdicts(
    old: TopologyFingerprint, new: TopologyFingerprint
) -> tuple[TopicVerdict, ...]:
    return tuple(
        TopicVerdict(topic, "source", *_source_change(topic, old, new))
        for topic in sorted(set(old.source_topics) | set(new.source_topics))
    )


def _source_change(
    topic: str, old: TopologyFingerprint, new: TopologyFingerprint
) -> tuple[TopicChange, str]:
    if topic not in old.source_topics:
        return TopicChange.NEW, "new source"
    if topic not in new.source_topics:
        return TopicChange.DROPPED, "dropped: no longer read"
    was = (old.source_partitions or {}).get(topic)
    now = (new.source_partitions or {}).get(topic)
    if was is None or now is None:
        return TopicChange.UNCHANGED, "unchanged (partition count not known on both sides)"
    if was != now:
        return TopicChange.PARTITIONS_CHANGED, (
            f"{was} -> {now} partitions (keys move to other tasks: the state needs repartitioning)"
        )
    return TopicChange.UNCHANGED, f"{now} partitions"


def _as_app(topic: str | None, old_app: str, new_app: str) -> str | None:
    """``topic`` as the new application id names it: the old id's prefix replaced (a new
    version under a new id has its own changelogs and repartition topics)."""
    if topic is not None and old_app != new_app and topic.startswith(f"{old_app}-"):
        return f"{new_app}-{topic[len(old_app) + 1 :]}"
    return topic


def _repartition_verdicts(
    old: TopologyFingerprint, new: TopologyFingerprint
) -> tuple[TopicVerdict, ...]:
    old_topics = tuple(
        _as_app(t, old.application_id, new.application_id) or t for t in old.repartition_topics
    )
    old = dataclasses.replace(old, repartition_topics=old_topics)
    shifted = shifted_pairs(
        [t for t in old.repartition_topics if is_generated_topic(t)],
        [t for t in new.repartition_topics if is_generated_topic(t)],
    )
    renamed_to = {old_name: new_name for new_name, old_name in shifted.items()}
    verdicts = []
    for topic in sorted(set(old.repartition_topics) | set(new.repartition_topics)):
        notes = [HINT] if is_generated_topic(topic) else []
        if topic not in old.repartition_topics:
            if topic in shifted:
                notes.append(f"probably {shifted[topic]} renamed by the counter")
            change, detail = TopicChange.NEW, "new"
        elif topic not in new.repartition_topics:
            if topic in renamed_to:
                notes.append(f"probably renamed to {renamed_to[topic]} by the counter")
            change = TopicChange.DROPPED
            detail = "dropped: records still in it are not processed"
        else:
            change, detail = TopicChange.UNCHANGED, "unchanged"
        verdicts.append(TopicVerdict(topic, "repartition", change, detail, tuple(notes)))
    return tuple(verdicts)
