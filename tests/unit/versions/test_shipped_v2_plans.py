"""The shipped apps' version 2 (spark_apps/word_count_v2, spark_apps/patient_monitoring_v2)
against version 1: the verdicts `upgrade plan` gives and the steps `upgrade migrate` takes
(both topologies fingerprinted under v2's application id, as the migration compares them:
docs/changing-apps.md), their specs, and their migration functions on v1's values."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from statekeeper.app.spec import AppSpec, load_app_spec, spec_json_schema
from statekeeper.migration import (
    MigrationRefused,
    StoreAction,
    StoreCounts,
    StoreMigration,
    migrated_entries,
    store_steps,
)
from statekeeper.stores.serdes import SerdeError, serde_for
from statekeeper.testing.app_process import spark_app_spec
from statekeeper.versions import (
    StoreChange,
    TopicChange,
    TopologyFingerprint,
    UpgradePlan,
    compare,
    fingerprint_of,
)

UNCHANGED = StoreChange.UNCHANGED
MIGRATION = StoreChange.NEEDS_MIGRATION
NEW = StoreChange.NEW
PARTITIONS = 4


@dataclass(frozen=True)
class Pair:
    """v1's and v2's app folders; every store's and topic's verdict, the reasons of the
    changed ones, and every store's migration step."""

    old: str
    new: str
    stores: dict[str, StoreChange]
    topics: dict[str, TopicChange]
    reasons: dict[str, str]
    steps: dict[str, StoreAction]
    migrations: dict[str, str] = field(default_factory=dict)  # store -> function name


PAIRS = [
    Pair(
        "word_count",
        "word_count_v2",
        stores={"sk-task-state-1": UNCHANGED, "word-counts": MIGRATION},
        topics={"lines": TopicChange.UNCHANGED, "word-count-v2-words-repartition": UNCHANGED},
        reasons={"word-counts": "store word-counts: value serde int -> json"},
        steps={"sk-task-state-1": StoreAction.COPY, "word-counts": StoreAction.MIGRATE},
        migrations={"word-counts": "word_counts_v2"},
    ),
    Pair(
        "patient_monitoring",
        "patient_monitoring_v2",
        stores={
            "heart-rate": MIGRATION,
            "heart-rate-suppress-store": UNCHANGED,
            "pulse-counts": UNCHANGED,
            "sk-task-state-0": UNCHANGED,
            "temperature-peaks": NEW,
        },
        topics={"patient-events": TopicChange.UNCHANGED},
        reasons={
            "heart-rate": "store heart-rate: value serde json -> json/heart-rate-v2",
            "temperature-peaks": "new: it starts empty",
        },
        steps={
            "heart-rate": StoreAction.MIGRATE,
            "heart-rate-suppress-store": StoreAction.COPY,
            "pulse-counts": StoreAction.COPY,
            "sk-task-state-0": StoreAction.COPY,
            "temperature-peaks": StoreAction.EMPTY,
        },
        migrations={"heart-rate": "heart_rate_v2"},
    ),
]
IDS = [p.new for p in PAIRS]


def _specs(pair: Pair) -> tuple[AppSpec, AppSpec]:
    return load_app_spec(spark_app_spec(pair.old)), load_app_spec(spark_app_spec(pair.new))


def _fingerprints(pair: Pair) -> tuple[TopologyFingerprint, TopologyFingerprint]:
    """v1 and v2 under v2's application id, each source topic on PARTITIONS partitions."""
    old, new = _specs(pair)
    app = new.application_id

    def of(spec: AppSpec) -> TopologyFingerprint:
        topology = spec.build_topology()
        partitions = {t: PARTITIONS for t in fingerprint_of(topology, app).source_topics}
        return fingerprint_of(topology, app, partitions)

    return of(old), of(new)


def _plan(pair: Pair) -> UpgradePlan:
    return compare(*_fingerprints(pair))


@pytest.mark.parametrize("pair", PAIRS, ids=IDS)
def test_the_plan_gives_every_store_and_topic_its_intended_verdict(pair: Pair) -> None:
    plan = _plan(pair)
    assert {v.store: v.change for v in plan.stores} == pair.stores
    assert {v.topic: v.change for v in plan.topics} == pair.topics
    for store, text in pair.reasons.items():
        assert text in plan.store(store).reason, plan.store(store).reason
    assert not plan.compatible  # v2 does not start on v1's state as it is
    assert [v.store for v in plan.blocking] == [
        s for s, change in sorted(pair.stores.items()) if change is MIGRATION
    ]
    assert all(not v.notes for v in (*plan.stores, *plan.topics))  # no generated names


@pytest.mark.parametrize("pair", PAIRS, ids=IDS)
def test_migrate_takes_the_intended_step_per_store(pair: Pair) -> None:
    old, new = _fingerprints(pair)
    old_spec, new_spec = _specs(pair)
    declared = set(new_spec.migrations)
    assert declared == set(pair.migrations)
    steps = store_steps(compare(old, new), old, new, declared)
    assert {s.store: s.action for s in steps} == pair.steps
    # Every store it carries keeps its subtopology (a moved store is refused).
    assert all(
        old.store(s.store).subtopology == new.store(s.store).subtopology  # type: ignore[union-attr]
        for s in steps
        if s.action in (StoreAction.COPY, StoreAction.MIGRATE)
    )
    # Without its migrations v2 is refused, naming each store that needs one.
    with pytest.raises(MigrationRefused) as refused:
        store_steps(compare(old, new), old, new, set())
    for store in pair.migrations:
        assert f"store {store}: " in str(refused.value)


@pytest.mark.parametrize("pair", PAIRS, ids=IDS)
def test_v2_on_a_source_with_other_partitions_needs_repartitioning(pair: Pair) -> None:
    old, new = _fingerprints(pair)
    grown = TopologyFingerprint.from_dict(
        {**new.to_dict(), "source_partitions": {t: PARTITIONS + 2 for t in new.source_topics}}
    )
    plan = compare(old, grown)
    assert {v.topic for v in plan.topics if v.change is TopicChange.PARTITIONS_CHANGED} == set(
        new.source_topics
    )


@pytest.mark.parametrize("pair", PAIRS, ids=IDS)
def test_the_v2_spec_loads_and_validates(pair: Pair) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    old, new = _specs(pair)
    path = spark_app_spec(pair.new)
    assert path.parent.name == pair.new
    raw = _raw(path)
    jsonschema.validate(raw, spec_json_schema())
    assert new.application_id != old.application_id  # a migration needs a new id
    assert new.application_id == f"{old.application_id}-v2"
    assert new.params["input_topic"] == old.params["input_topic"]
    # v2's outputs are new topics: their values changed, and v1 may still run.
    outputs = {k: v for k, v in new.params.items() if k.endswith("_topic") and k != "input_topic"}
    assert outputs and not set(outputs.values()) & set(old.params.values())
    # Kept stopped by the statekeeper_apps DAG until its state is migrated; no generator,
    # so the platform does not seed v1's input topic a second time.
    assert new.enabled is False and new.generator is None
    for store, function in pair.migrations.items():
        declared = new.migrations[store]
        assert (declared.kind, declared.ref) == (
            "record",
            f"{path.parent}/migrations.py:{function}",
        )
        assert new.migration_function(store).__name__ == function
    assert new.build_topology().subtopologies


def _raw(path: Any) -> dict[str, Any]:
    import tomllib

    import yaml

    text = path.read_text()
    return tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)


def _value_serde(spec: AppSpec, store: str) -> Any:
    topology = spec.build_topology()
    found = [
        s for sub in topology.subtopologies for s in topology.store_specs(sub.id) if s.name == store
    ]
    assert len(found) == 1, store
    return serde_for(found[0].value_serde)


def _migrated(spec: AppSpec, store: str, entries: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """``entries`` through the store's declared migration, as `upgrade migrate` applies it."""
    declared = spec.migrations[store]
    migration = StoreMigration(store, declared.kind, spec.migration_function(store), declared.ref)
    counts = StoreCounts()
    out = list(migrated_entries(migration, entries, counts))
    assert (counts.read, counts.dropped) == (len(entries), 0)
    return out


def test_word_counts_v2_maps_v1_counts() -> None:
    old, new = _specs(PAIRS[0])
    v1_values = [("hello", 1), ("o'clock", 7), ("2024", 123_456_789)]
    migrated = _migrated(new, "word-counts", v1_values)
    assert migrated == [
        ("hello", {"count": 1, "first_seen_ms": None}),
        ("o'clock", {"count": 7, "first_seen_ms": None}),
        ("2024", {"count": 123_456_789, "first_seen_ms": None}),
    ]
    # v1's values decode with v1's serde; the migrated ones encode with v2's.
    v1_serde, v2_serde = _value_serde(old, "word-counts"), _value_serde(new, "word-counts")
    assert v1_serde.deserialize(v1_serde.serialize(7)) == 7
    for _word, value in migrated:
        assert v2_serde.deserialize(v2_serde.serialize(value)) == value


def test_heart_rate_v2_maps_v1_entries() -> None:
    old, new = _specs(PAIRS[1])
    v1_values = [
        ("p0001", {"bpm": 72, "window_start": 1_700_000_040_000}),
        ("p0042", {"bpm": 131, "window_start": 0}),
    ]
    migrated = _migrated(new, "heart-rate", v1_values)
    assert migrated == [
        ("p0001", {"bpm": 72, "window_start": 1_700_000_040_000, "window_end": 1_700_000_100_000}),
        ("p0042", {"bpm": 131, "window_start": 0, "window_end": 60_000}),
    ]
    v2_serde = _value_serde(new, "heart-rate")
    for _patient, value in migrated:
        assert v2_serde.deserialize(v2_serde.serialize(value)) == value
    # The v2 serde refuses v1's entries both ways: a store left unmigrated fails loudly.
    v1_bytes = _value_serde(old, "heart-rate").serialize(v1_values[0][1])
    with pytest.raises(SerdeError, match="not a json/heart-rate-v2 entry"):
        v2_serde.deserialize(v1_bytes)
    with pytest.raises(SerdeError, match="not a json/heart-rate-v2 entry"):
        v2_serde.serialize(v1_values[0][1])


def test_heart_rate_v2_uses_v1s_window_size() -> None:
    from spark_apps.patient_monitoring_v2 import migrations

    old, _new = _fingerprints(PAIRS[1])
    window = old.store("pulse-counts").window  # type: ignore[union-attr]
    assert window is not None and window.size_ms == migrations.V1_WINDOW_MS
