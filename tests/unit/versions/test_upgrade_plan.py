"""`upgrade plan`'s comparison, table-tested over topology changes (tests/unit/versions/apps.py
builds each version of a small word-count app with the DSL)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from statekeeper.versions import (
    StoreChange,
    StoreVerdict,
    TopicChange,
    TopicVerdict,
    UpgradePlan,
    compare,
)
from statekeeper.versions.auto_names import HINT

from .apps import Version, fingerprint

UNCHANGED = StoreChange.UNCHANGED
COMPATIBLE = StoreChange.COMPATIBLE
MIGRATION = StoreChange.NEEDS_MIGRATION
NEW = StoreChange.NEW
DROPPED = StoreChange.DROPPED
PARTITIONS_CHANGED = TopicChange.PARTITIONS_CHANGED


@dataclass(frozen=True)
class Case:
    """Version ``old`` ran on ``old_partitions`` per source; ``new`` is planned on
    ``new_partitions``. ``stores``/``topics``: expected verdicts (unlisted ones: unchanged);
    ``reasons``: a substring of each named verdict's reason."""

    id: str
    old: Version
    new: Version
    stores: dict[str, StoreChange] = field(default_factory=dict)
    topics: dict[str, TopicChange] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    old_partitions: int = 4
    new_partitions: int = 4

    @property
    def compatible(self) -> bool:
        return MIGRATION not in self.stores.values() and (
            PARTITIONS_CHANGED not in self.topics.values()
        )


CASES = [
    Case("unchanged", Version(), Version()),
    Case(
        "value-serde",
        Version(),
        Version(counts_value_serde="json"),
        stores={"counts": MIGRATION},
        reasons={"counts": "store counts: value serde int -> json"},
    ),
    Case(
        "kind",
        Version(),
        Version(counts_store_type="in_memory"),
        stores={"counts": MIGRATION},
        reasons={"counts": "store counts: kind rocksdb -> memory"},
    ),
    Case(
        "window-size",
        Version(),
        Version(window_ms=30_000),
        stores={"per-minute": MIGRATION},
        reasons={"per-minute": "store per-minute: window size 60000 -> 30000 ms"},
    ),
    Case(
        "retention-grown",
        Version(),
        Version(retention_ms=240_000),
        stores={"per-minute": COMPATIBLE},
        reasons={"per-minute": "store per-minute: retention 120000 -> 240000 ms"},
    ),
    Case(
        "retention-shrunk",
        Version(retention_ms=240_000),
        Version(),
        stores={"per-minute": COMPATIBLE},
        reasons={"per-minute": "(older windows are dropped)"},
    ),
    Case(
        "caching",
        Version(),
        Version(counts_caching=1024),
        stores={"counts": COMPATIBLE},
        reasons={"counts": "caching 0 -> 1024"},
    ),
    Case(
        "logging-off",
        Version(),
        Version(counts_logging=False),
        stores={"counts": COMPATIBLE},
        reasons={"counts": "logging on -> off"},
    ),
    Case(
        "logging-on",
        Version(counts_logging=False),
        Version(),
        stores={"counts": COMPATIBLE},
        reasons={"counts": "logging off -> on"},
    ),
    Case(
        "store-added",
        Version(),
        Version(lengths=True),
        stores={"lengths": NEW},
        reasons={"lengths": "starts empty, or a backfill"},
    ),
    Case(
        "store-removed",
        Version(),
        Version(per_minute=False),
        stores={"per-minute": DROPPED},
        reasons={"per-minute": "changelog wc-per-minute-changelog are no longer read"},
    ),
    Case(
        "key-serde",
        Version(),
        Version(counts_key_serde="bytes"),
        stores={"counts": MIGRATION},
        reasons={"counts": "store counts: key serde str -> bytes"},
    ),
    Case(
        # What needs a migration wins; the tunings are said too, after it.
        "value-serde-and-caching",
        Version(),
        Version(counts_value_serde="json", counts_caching=1024),
        stores={"counts": MIGRATION},
        reasons={"counts": "value serde int -> json; caching 0 -> 1024"},
    ),
    Case(
        "kind-memory-to-lru",
        Version(counts_store_type="in_memory"),
        Version(counts_store_type="lru", counts_capacity=1_000),
        stores={"counts": MIGRATION},
        reasons={"counts": "kind memory -> lru"},
    ),
    Case(
        "lru-capacity",
        Version(counts_store_type="lru", counts_capacity=1_000),
        Version(counts_store_type="lru", counts_capacity=5_000),
        stores={"counts": COMPATIBLE},
        reasons={"counts": "capacity 1000 -> 5000"},
    ),
    Case(
        "read-cache",
        Version(),
        Version(counts_read_cache=0),
        stores={"counts": COMPATIBLE},
        reasons={"counts": "read cache 8388608 -> 0"},
    ),
    Case(
        "changelog-configs",
        Version(),
        Version(counts_changelog_configs=(("min.compaction.lag.ms", "60000"),)),
        stores={"counts": COMPATIBLE},
        reasons={"counts": "changelog configs {} -> {'min.compaction.lag.ms': '60000'}"},
    ),
    Case(
        "grace",
        Version(),
        Version(grace_ms=5_000),
        stores={"per-minute": COMPATIBLE},
        reasons={"per-minute": "store per-minute: grace 0 -> 5000 ms"},
    ),
    Case(
        "window-size-and-retention",
        Version(),
        Version(window_ms=30_000, retention_ms=240_000),
        stores={"per-minute": MIGRATION},
        reasons={"per-minute": "window size 60000 -> 30000 ms; retention 120000 -> 240000 ms"},
    ),
    Case(
        # A named grouping renamed: another repartition topic, read by the same subtopology,
        # whose task state (dedupe positions per topic) is another topic's.
        "grouping-renamed",
        Version(),
        Version(grouping="tokens"),
        stores={"sk-task-state-1": MIGRATION},
        topics={
            "wc-tokens-repartition": TopicChange.NEW,
            "wc-words-repartition": TopicChange.DROPPED,
        },
        reasons={
            "sk-task-state-1": "read ['wc-words-repartition'], now reads ['wc-tokens-repartition']",
            "wc-words-repartition": "records still in it are not processed",
        },
    ),
    Case(
        "partitions-6-to-4",
        Version(),
        Version(),
        topics={"lines": PARTITIONS_CHANGED},
        reasons={"lines": "source lines: 6 -> 4 partitions"},
        old_partitions=6,
    ),
    Case(
        "partitions-4-to-6",
        Version(),
        Version(),
        topics={"lines": PARTITIONS_CHANGED},
        reasons={"lines": "source lines: 4 -> 6 partitions"},
        new_partitions=6,
    ),
    Case("unrelated-node-added-named", Version(), Version(filter_first=True)),
    Case(
        # A stateful stream built first: every later subtopology's id grows by one.
        "stream-added-before",
        Version(),
        Version(other_stream_first=True),
        stores={
            "clicks": NEW,
            "counts": COMPATIBLE,
            "per-minute": COMPATIBLE,
            "sk-task-state-0": NEW,
            "sk-task-state-1": DROPPED,
            "sk-task-state-2": NEW,
        },
        topics={"clicks": TopicChange.NEW},
        reasons={"counts": "moves from subtopology 1 to 2: tasks 2_* rebuild it"},
    ),
    Case(
        # The stream built first removed: every later subtopology's id shrinks by one.
        "stream-removed-before",
        Version(other_stream_first=True),
        Version(),
        stores={
            "clicks": DROPPED,
            "counts": COMPATIBLE,
            "per-minute": COMPATIBLE,
            "sk-task-state-0": DROPPED,
            "sk-task-state-1": NEW,
            "sk-task-state-2": DROPPED,
        },
        topics={"clicks": TopicChange.DROPPED},
        reasons={
            "counts": "moves from subtopology 2 to 1: tasks 1_* rebuild it",
            "clicks": "changelog wc-clicks-changelog are no longer read",
        },
    ),
    Case(
        "stream-added-before-without-changelog",
        Version(counts_logging=False),
        Version(counts_logging=False, other_stream_first=True),
        stores={
            "clicks": NEW,
            "counts": MIGRATION,
            "per-minute": COMPATIBLE,
            "sk-task-state-0": NEW,
            "sk-task-state-1": DROPPED,
            "sk-task-state-2": NEW,
        },
        topics={"clicks": TopicChange.NEW},
        reasons={"counts": "has no changelog: tasks 2_* would start it empty"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_upgrade_plan(case: Case) -> None:
    plan = compare(
        fingerprint(case.old, case.old_partitions), fingerprint(case.new, case.new_partitions)
    )
    stores = {v.store: v.change for v in plan.stores if v.change is not UNCHANGED}
    topics = {v.topic: v.change for v in plan.topics if v.change is not TopicChange.UNCHANGED}
    assert (stores, topics) == (case.stores, case.topics)
    for name, text in case.reasons.items():
        assert text in _verdict(plan, name).reason, _verdict(plan, name).reason
    assert plan.compatible is case.compatible
    assert plan.blocking == [
        v for v in (*plan.stores, *plan.topics) if v.change in (MIGRATION, PARTITIONS_CHANGED)
    ]


def _verdict(plan: UpgradePlan, name: str) -> StoreVerdict | TopicVerdict:
    """The verdict of the store or topic ``name``."""
    stores = [v for v in plan.stores if v.store == name]
    return stores[0] if stores else plan.topic(name)


def test_an_unrelated_node_shifts_generated_names_and_the_plan_says_so() -> None:
    """Without explicit names a filter added upstream renumbers the stores and the grouping's
    repartition topic (Kafka Streams' KSTREAM-AGGREGATE-STATE-STORE-0000000003 problem)."""
    old = fingerprint(Version(named=False))
    new = fingerprint(Version(named=False, filter_first=True))
    plan = compare(old, new)
    changes = {v.store: v.change for v in plan.stores}
    assert changes == {
        "kstream-aggregate-state-store-0000000003": DROPPED,
        "kstream-aggregate-state-store-0000000004": NEW,
        "kstream-aggregate-state-store-0000000007": DROPPED,
        "kstream-aggregate-state-store-0000000008": NEW,
        # its subtopology now reads the renamed repartition topic
        "sk-task-state-1": MIGRATION,
    }
    renamed = plan.store("kstream-aggregate-state-store-0000000004")
    assert HINT in renamed.notes
    assert any("kstream-aggregate-state-store-0000000003 renamed" in n for n in renamed.notes)
    gone = plan.store("kstream-aggregate-state-store-0000000007")
    assert any("renamed to kstream-aggregate-state-store-0000000008" in n for n in gone.notes)
    topic = plan.topic("wc-kstream-aggregate-state-store-0000000004-repartition")
    assert topic.change is TopicChange.NEW and HINT in topic.notes
    assert not plan.compatible


def test_named_stores_carry_no_generated_name_note() -> None:
    plan = compare(fingerprint(Version()), fingerprint(Version(filter_first=True)))
    assert all(not v.notes for v in (*plan.stores, *plan.topics))
    assert plan.old_digest == plan.new_digest  # node names are not part of the state


def test_unknown_partition_counts_compare_as_unchanged() -> None:
    plan = compare(fingerprint(Version(), None), fingerprint(Version(), 6))
    assert plan.topic("lines").change is TopicChange.UNCHANGED
    assert "not known" in plan.topic("lines").reason and plan.compatible


def test_another_application_id_is_noted() -> None:
    from statekeeper.versions import fingerprint_of

    from .apps import build

    plan = compare(fingerprint(Version()), fingerprint_of(build(Version()), "other"))
    assert plan.notes and "application id wc -> other" in plan.notes[0]
    # Under a new id every changelog and repartition topic is renamed the same way: the
    # state is read as it is (a migration copies it into the new id's changelogs).
    assert plan.store("counts").change is StoreChange.UNCHANGED
    assert all(t.change is TopicChange.UNCHANGED for t in plan.topics), plan.topics
