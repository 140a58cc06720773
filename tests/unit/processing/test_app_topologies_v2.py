"""The shipped apps' version 2 (spark_apps/*_v2) built from their specs: on hand-made inputs
(the topology and the reference model each against values computed by hand), on generated
inputs against their reference models, and continuing from v1's state migrated as `upgrade
migrate` does it (store steps and migration functions of the library, in memory: no broker,
no changelog) against the reference model told where the upgrade happened."""

from __future__ import annotations

from typing import Any

import pytest

from spark_apps.patient_monitoring import generator as patient_generator
from spark_apps.patient_monitoring_v2 import reference as patient_reference
from spark_apps.word_count import generator as word_generator
from spark_apps.word_count_v2 import reference as word_reference
from statekeeper.app.spec import AppSpec, load_app_spec
from statekeeper.generate.records import place_records
from statekeeper.kafka.model import KafkaRecord
from statekeeper.migration import (
    StoreAction,
    StoreCounts,
    StoreMigration,
    migrated_entries,
    store_steps,
)
from statekeeper.stores.typed import WindowStore
from statekeeper.testing.app_process import spark_app_spec
from statekeeper.versions import compare, fingerprint_of

from .harness import APP, Harness, as_json, records


def _spec(app: str) -> AppSpec:
    return load_app_spec(spark_app_spec(app))


# -- word_count v2 -----------------------------------------------------------------------------

LINES = [
    KafkaRecord("lines", 0, 0, 10, None, b"Hello, hello WORLD!"),
    KafkaRecord("lines", 0, 1, 11, b"k", None),
    KafkaRecord("lines", 0, 2, 12, None, b"caf\xff"),
    KafkaRecord("lines", 0, 3, 5, None, b"world -- again"),  # an earlier timestamp
]
#: By hand: per word its occurrences and the smallest timestamp of its lines.
LINES_COUNTS = {
    "hello": {"count": 2, "first_seen_ms": 10},
    "world": {"count": 2, "first_seen_ms": 5},
    "again": {"count": 1, "first_seen_ms": 5},
}


def _words_down(harness, topology, up: list[Harness], name: str, offset: int = 0) -> Harness:
    """The counting task fed what the line tasks ``up`` sent to the repartition topic."""
    repartitioned = [s for h in up for s in h.emitter.to(f"{APP}-words-repartition")]
    down = harness(topology, name=name, subtopology=1)
    down.run([s.as_record(0, offset + i) for i, s in enumerate(repartitioned)])
    return down


def test_word_count_v2_counts_and_first_seen(harness) -> None:
    topology = _spec("word_count_v2").build_topology()
    v1 = _spec("word_count").build_topology()
    assert topology.internal_topics(APP) == v1.internal_topics(APP) == [f"{APP}-words-repartition"]
    up = harness(topology, name="up")
    assert up.run(LINES).records_dlq == 2
    down = _words_down(harness, topology, [up], "down")
    assert down.contents("word-counts") == LINES_COUNTS
    latest = dict(down.emitter.kv("word-counts-v2", as_json))
    assert latest == LINES_COUNTS


def test_word_count_v2_reference_by_hand() -> None:
    result = word_reference.recompute(LINES)
    assert result.counts == LINES_COUNTS
    assert result.dlq == [("lines", 0, 1), ("lines", 0, 2)]
    assert (result.records, result.words) == (4, 5)
    # v1 read offsets 0 and 1: its words were seen before the upgrade, time unknown.
    upgraded = word_reference.recompute(LINES, upgraded_at={0: 2})
    assert upgraded.counts == {
        "hello": {"count": 2, "first_seen_ms": None},
        "world": {"count": 2, "first_seen_ms": None},
        "again": {"count": 1, "first_seen_ms": 5},
    }


def _placed_lines() -> dict[int, list[KafkaRecord]]:
    return place_records(word_generator.word_count_lines(1_500, seed=4), "lines", 2)


def _run_lines(harness, topology, placed, name: str, batch_id: int = 0) -> list[Harness]:
    """One line task per partition, 500 records a batch; batch ids from ``batch_id + 1``."""
    tasks = []
    for partition, recs in placed.items():
        h = harness(topology, name=f"{name}{partition}", partition=partition)
        h.batch_id = batch_id
        for i in range(0, len(recs), 500):
            h.run(recs[i : i + 500], batch_time_ms=1_000 + i)
        tasks.append(h)
    return tasks


def test_word_count_v2_matches_its_reference_model(harness) -> None:
    placed = _placed_lines()
    topology = _spec("word_count_v2").build_topology()
    down = _words_down(harness, topology, _run_lines(harness, topology, placed, "up"), "down")
    expected = word_reference.recompute(placed)
    assert down.contents("word-counts") == expected.counts
    assert any(e["first_seen_ms"] for e in expected.counts.values())


# -- migrating v1's state in memory ------------------------------------------------------------


def _entries(h: Harness, store: str) -> list[tuple[Any, Any]]:
    """A store's entries as a migration reads them (a window store's keyed (key, start))."""
    return list(h.contents(store).items())


def _migrate(old_app: str, new_app: str, old: Harness, new: Harness) -> dict[str, StoreAction]:
    """Write ``old``'s committed state into ``new`` as `upgrade migrate` does for one task:
    per store the library's step (copy, migrate, start empty) from the two versions'
    fingerprints and the migration the new spec declares; committed at ``old``'s batch id
    and source offsets."""
    old_spec, new_spec = _spec(old_app), _spec(new_app)
    assert old_spec.application_id != new_spec.application_id
    before = fingerprint_of(old.topology, new_spec.application_id)
    after = fingerprint_of(new.topology, new_spec.application_id)
    steps = store_steps(compare(before, after), before, after, set(new_spec.migrations))
    done = {}
    for step in steps:
        if step.subtopology != new.subtopology:
            continue
        done[step.store] = step.action
        if step.action not in (StoreAction.COPY, StoreAction.MIGRATE):
            continue
        entries = _entries(old, step.store)
        if step.action is StoreAction.MIGRATE:
            declared = new_spec.migrations[step.store]
            function = new_spec.migration_function(step.store)
            migration = StoreMigration(step.store, declared.kind, function, declared.ref)
            entries = list(migrated_entries(migration, entries, StoreCounts()))
        store = new.state.store(step.store)
        for key, value in entries:
            if isinstance(store, WindowStore):
                store.put(key[0], value, key[1])
            else:
                store.put(key, value)
    new.state.commit(old.batch_id, dict(old.state.processed_offsets))
    new.batch_id = old.batch_id
    new.restart()  # the task reads its migrated task state (stream time, dedupe positions)
    return done


def _split(placed: dict[int, list[KafkaRecord]], share: float) -> dict[int, int]:
    """Per partition the first offset the new version reads."""
    return {p: int(len(recs) * share) for p, recs in placed.items()}


def test_word_count_v1_state_migrated_then_v2(harness) -> None:
    placed = _placed_lines()
    upgraded_at = _split(placed, 0.6)
    first = {p: recs[: upgraded_at[p]] for p, recs in placed.items()}
    rest = {p: recs[upgraded_at[p] :] for p, recs in placed.items()}
    v1 = _spec("word_count").build_topology()
    v2 = _spec("word_count_v2").build_topology()

    v1_up = _run_lines(harness, v1, first, "v1-up")  # v1 drained: nothing left to repartition
    v1_down = _words_down(harness, v1, v1_up, "v1-down")
    v2_down = harness(v2, name="v2-down", subtopology=1)
    steps = _migrate("word_count", "word_count_v2", v1_down, v2_down)
    assert steps == {"sk-task-state-1": StoreAction.COPY, "word-counts": StoreAction.MIGRATE}
    assert v2_down.contents("word-counts") == {
        w: {"count": n, "first_seen_ms": None} for w, n in v1_down.contents("word-counts").items()
    }

    # v2's line tasks go on from the upgrade offsets. They number their batches on from v1's
    # (the harness's repartition topic is one name for both versions: the counting task's
    # copied dedupe positions would otherwise skip them).
    v2_up = _run_lines(harness, v2, rest, "v2-up", batch_id=max(h.batch_id for h in v1_up))
    repartitioned = [s for h in v2_up for s in h.emitter.to(f"{APP}-words-repartition")]
    offset = v1_down.state.processed_offsets[f"{APP}-words-repartition:0"]
    v2_down.run([s.as_record(0, offset + i) for i, s in enumerate(repartitioned)])
    expected = word_reference.recompute(placed, upgraded_at=upgraded_at)
    assert v2_down.contents("word-counts") == expected.counts
    firsts = [e["first_seen_ms"] for e in expected.counts.values()]
    assert None in firsts and any(firsts)  # words from both sides of the upgrade


# -- patient_monitoring v2 ---------------------------------------------------------------------


def _events(items: list[tuple[Any, Any, int]]) -> list[KafkaRecord]:
    return records("patient-events", items)


EVENTS = _events(
    [
        ("p1", {"type": "pulse"}, 1_000),
        ("p1", {"type": "pulse"}, 2_000),
        ("p1", {"type": "pulse"}, 3_000),
        ("p1", {"type": "temperature", "temp_f": 101.5}, 10_000),
        ("p2", {"type": "temperature", "temp_f": 99}, 15_000),
        ("p2", {"type": "pulse"}, 16_000),
        ("p1", {"type": "temperature", "temp_f": 102.0}, 20_000),
        ("p1", {"type": "temperature", "temp_f": 100.5}, 25_000),
        ("p3", {"type": "pulse"}, 66_000),  # closes the windows at 0: p1 3 bpm, p2 1 bpm
        ("p1", {"type": "temperature", "temp_f": 104.0}, 30_000),  # late: window 0 closed
        ("p1", {"type": "temperature", "temp_f": "hot"}, 67_000),  # DLQ
        ("p2", {"type": "checkout"}, 68_000),  # drops p2's heart rate and windows
        ("p3", {"type": "temperature", "temp_f": 103}, 70_000),
    ]
)
#: By hand, from the events above.
EVENTS_PEAKS = {
    ("p1", 0): {"max_temp_f": 102.0, "readings": 3},
    ("p3", 60_000): {"max_temp_f": 103, "readings": 1},
}
EVENTS_HEART_RATE = {"p1": {"bpm": 3, "window_start": 0, "window_end": 60_000}}
EVENTS_OUTPUTS = [
    ("p1", {"bpm": 3, "window_start": 0, "window_end": 60_000}),
    ("p2", {"bpm": 1, "window_start": 0, "window_end": 60_000}),
    ("p2", None),
]
EVENTS_PULSES = {("p1", 0): 3, ("p3", 60_000): 1}


def test_patient_monitoring_v2_heart_rate_and_temperature_peaks(harness) -> None:
    h = harness(_spec("patient_monitoring_v2").build_topology())
    result = h.run(EVENTS, batch_time_ms=1)
    assert (result.records_dlq, result.records_late_dropped) == (1, 1)
    assert h.contents("temperature-peaks") == EVENTS_PEAKS
    assert h.contents("heart-rate") == EVENTS_HEART_RATE
    assert h.contents("pulse-counts") == EVENTS_PULSES
    assert h.emitter.kv("heart-rate-v2", as_json) == EVENTS_OUTPUTS
    assert h.emitter.kv("patient-alerts-v2") == []


def test_patient_monitoring_v2_reference_by_hand() -> None:
    result = patient_reference.recompute(EVENTS)
    assert result.temperature_peaks == EVENTS_PEAKS
    assert result.heart_rate == EVENTS_HEART_RATE
    assert result.heart_rate_outputs == EVENTS_OUTPUTS
    assert result.pulse_windows == EVENTS_PULSES
    assert (len(result.dlq), result.late_dropped) == (1, 1)
    # Upgraded at offset 6: the peaks of the readings before it are not there.
    upgraded = patient_reference.recompute(EVENTS, upgraded_at={0: 6})
    assert upgraded.temperature_peaks == {
        ("p1", 0): {"max_temp_f": 102.0, "readings": 2},
        ("p3", 60_000): {"max_temp_f": 103, "readings": 1},
    }
    assert upgraded.heart_rate == EVENTS_HEART_RATE


def _placed_events() -> dict[int, list[KafkaRecord]]:
    generated = patient_generator.patient_events(
        patients=12, minutes=20, seed=11, malformed_share=0.02, late_share=0.05
    )
    return place_records(generated, "patient-events", 3)


def _run_events(harness, topology, placed, name: str) -> dict[int, Harness]:
    tasks = {}
    for partition, recs in placed.items():
        h = harness(topology, name=f"{name}{partition}", partition=partition)
        for i in range(0, len(recs), 700):
            h.run(recs[i : i + 700], batch_time_ms=1_000 + i)
        tasks[partition] = h
    return tasks


def _patient_state(tasks: dict[int, Harness]) -> dict[str, dict[Any, Any]]:
    state: dict[str, dict[Any, Any]] = {"temperature-peaks": {}, "heart-rate": {}}
    state["pulse-counts"] = {}
    for partition in sorted(tasks):
        for store, contents in state.items():
            contents.update(tasks[partition].contents(store))
    return state


def _expected_state(expected: Any) -> dict[str, dict[Any, Any]]:
    return {
        "temperature-peaks": expected.temperature_peaks,
        "heart-rate": expected.heart_rate,
        "pulse-counts": expected.pulse_windows,
    }


def test_patient_monitoring_v2_matches_its_reference_model(harness) -> None:
    placed = _placed_events()
    tasks = _run_events(harness, _spec("patient_monitoring_v2").build_topology(), placed, "t")
    expected = patient_reference.recompute(placed)
    assert _patient_state(tasks) == _expected_state(expected)
    outputs = [kv for p in sorted(tasks) for kv in tasks[p].emitter.kv("heart-rate-v2", as_json)]
    assert outputs == expected.heart_rate_outputs
    alerts = [
        v for p in sorted(tasks) for _, v in tasks[p].emitter.kv("patient-alerts-v2", as_json)
    ]
    assert alerts == expected.alerts
    assert expected.temperature_peaks and expected.alerts and expected.late_dropped


@pytest.mark.parametrize("share", [0.3, 0.7])
def test_patient_monitoring_v1_state_migrated_then_v2(harness, share: float) -> None:
    placed = _placed_events()
    upgraded_at = _split(placed, share)
    v1 = _run_events(
        harness,
        _spec("patient_monitoring").build_topology(),
        {p: recs[: upgraded_at[p]] for p, recs in placed.items()},
        "v1-",
    )
    v2_topology = _spec("patient_monitoring_v2").build_topology()
    v2 = {}
    for partition, old in v1.items():
        new = v2[partition] = harness(v2_topology, name=f"v2-{partition}", partition=partition)
        assert _migrate("patient_monitoring", "patient_monitoring_v2", old, new) == {
            "heart-rate": StoreAction.MIGRATE,
            "heart-rate-suppress-store": StoreAction.COPY,
            "pulse-counts": StoreAction.COPY,
            "sk-task-state-0": StoreAction.COPY,
            "temperature-peaks": StoreAction.EMPTY,
        }
        rest = placed[partition][upgraded_at[partition] :]
        for i in range(0, len(rest), 700):
            new.run(rest[i : i + 700], batch_time_ms=1_000 + i)
    expected = patient_reference.recompute(placed, upgraded_at=upgraded_at)
    assert _patient_state(v2) == _expected_state(expected)
    whole = patient_reference.recompute(placed)
    assert expected.heart_rate == whole.heart_rate  # the migration loses nothing there
    assert expected.temperature_peaks != whole.temperature_peaks  # it started empty


# -- shipped to Spark executors ----------------------------------------------------------------


@pytest.mark.parametrize("app", ["word_count_v2", "patient_monitoring_v2"])
def test_topology_and_migrations_pickle_by_value(harness, app: str) -> None:
    """What Spark ships: the topology (its custom serde and processors too) and the
    migration functions, by value (the spec imports their files by path)."""
    import pickle

    from pyspark import cloudpickle

    spec = _spec(app)
    topology = spec.build_topology()
    clone = pickle.loads(cloudpickle.dumps(topology))
    assert clone.describe() == topology.describe()
    for store in spec.migrations:
        function = pickle.loads(cloudpickle.dumps(spec.migration_function(store)))
        assert function.__name__ == spec.migrations[store].ref.rpartition(":")[2]
    if app == "patient_monitoring_v2":
        h = harness(clone)
        h.run(EVENTS, batch_time_ms=1)
        assert h.contents("heart-rate") == EVENTS_HEART_RATE
        assert function("p", {"bpm": 1, "window_start": 0}) == (
            "p",
            {"bpm": 1, "window_start": 0, "window_end": 60_000},
        )
