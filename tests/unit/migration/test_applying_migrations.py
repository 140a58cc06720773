"""Applying a store's migration to its entries (per record and whole-store, in memory), and
the per-store steps a migration takes from the two versions' fingerprints."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import pytest

from statekeeper.migration import (
    MigrationError,
    StoreAction,
    StoreCounts,
    StoreMigration,
    migrated_entries,
    store_steps,
)
from statekeeper.migration.functions import (
    migrated_columns,
)
from statekeeper.versions import compare
from tests.unit.versions.apps import Version, fingerprint

OLD = [("a", 1), ("b", 2), ("c", 3)]


def _run(
    migration: StoreMigration, entries: Iterable[tuple[Any, Any]] = OLD
) -> tuple[list, StoreCounts]:
    counts = StoreCounts()
    return list(migrated_entries(migration, entries, counts)), counts


def test_per_record_rewrites_and_drops() -> None:
    def wrap(key: str, value: int) -> tuple[str, dict[str, int]] | None:
        return None if value == 2 else (key, {"count": value})

    out, counts = _run(StoreMigration("counts", "record", wrap))
    assert out == [("a", {"count": 1}), ("c", {"count": 3})]
    assert (counts.read, counts.dropped) == (3, 1)


def test_per_record_window_keys_are_pairs() -> None:
    def shift(key: tuple[str, int], value: int) -> tuple[tuple[str, int], int]:
        word, start = key
        return (word, start), value * 10

    out, _ = _run(StoreMigration("per-minute", "record", shift), [(("a", 60_000), 1)])
    assert out == [(("a", 60_000), 10)]


def test_whole_store_rekeys_and_merges() -> None:
    def by_parity(items: Iterable[tuple[str, int]]) -> Iterator[tuple[str, int]]:
        totals: dict[str, int] = {}
        for _key, value in items:
            parity = "odd" if value % 2 else "even"
            totals[parity] = totals.get(parity, 0) + value
        yield from sorted(totals.items())

    out, counts = _run(StoreMigration("counts", "store", by_parity))
    assert out == [("even", 2), ("odd", 4)]
    assert (counts.read, counts.dropped) == (3, 0)


@pytest.mark.parametrize(
    ("kind", "function", "message"),
    [
        (
            "record",
            lambda k, v: 1 / 0,
            r"store counts: migration <lambda>\(\) \(m\.py:f\) raised "
            r"ZeroDivisionError: division by zero on key 'a'",
        ),
        (
            "record",
            lambda k, v: v,
            r"returned 1 for key 'a': expected a \(key, value\) pair or None",
        ),
        ("store", lambda items: None, r"returned None, not the new entries"),
        (
            "store",
            lambda items: [("a", 1, 2)],
            r"returned \('a', 1, 2\): expected a \(key, value\)",
        ),
        ("store", lambda items: [x / 0 for x in items], r"raised TypeError"),
    ],
)
def test_failures_name_the_store_the_function_and_the_key(kind, function, message) -> None:
    with pytest.raises(MigrationError, match=message):
        _run(StoreMigration("counts", kind, function, "m.py:f"))


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (lambda k, v: 1 / 0 if k == "b" else (k, v), r"ZeroDivisionError.* on key 'b'"),
        (lambda k, v: v if k == "c" else (k, v), r"returned 3 for key 'c': expected a \(key"),
        (lambda k, v: (k, v, 1) if k == "a" else (k, v), r"returned \('a', 1, 1\) for key 'a'"),
    ],
)
def test_a_chunk_migrates_as_its_entries_would_and_fails_naming_the_key(function, message):
    def wrap(key: str, value: int) -> tuple[str, dict[str, int]] | None:
        return None if value == 2 else (key.upper(), {"count": value})

    keys, values = [k for k, _ in OLD], [v for _, v in OLD]
    counts = StoreCounts()
    out = migrated_columns(StoreMigration("counts", "record", wrap), keys, values, counts)
    one_by_one, expected = _run(StoreMigration("counts", "record", wrap))
    assert list(zip(*out, strict=True)) == one_by_one
    assert (counts.read, counts.dropped) == (expected.read, expected.dropped) == (3, 1)
    everything_dropped = migrated_columns(
        StoreMigration("counts", "record", lambda k, v: None), keys, values, counts
    )
    assert everything_dropped == ([], [])
    with pytest.raises(MigrationError, match=message):
        migrated_columns(StoreMigration("counts", "record", function), keys, values, counts)


# -- the steps ---------------------------------------------------------------------------------


def _steps(old: Version, new: Version, declared: set[str], old_partitions: int = 4) -> dict:
    before, after = fingerprint(old, old_partitions), fingerprint(new)
    steps = store_steps(compare(before, after), before, after, declared)
    return {s.store: s.action for s in steps}


def test_steps_copy_migrate_empty_and_skip() -> None:
    steps = _steps(
        Version(counts_value_serde="int"),
        Version(counts_value_serde="json", per_minute=False, lengths=True, retention_ms=240_000),
        {"counts"},
    )
    assert steps == {
        "counts": StoreAction.MIGRATE,
        "lengths": StoreAction.EMPTY,
        "per-minute": StoreAction.SKIP,
        "sk-task-state-1": StoreAction.COPY,
    }


def test_a_declared_migration_applies_to_a_compatible_store_too() -> None:
    steps = _steps(Version(), Version(retention_ms=240_000), {"per-minute"})
    assert steps["per-minute"] is StoreAction.MIGRATE
    assert steps["counts"] is StoreAction.COPY


def test_needs_migration_without_one_is_refused_naming_the_store() -> None:
    with pytest.raises(
        MigrationError,
        match=r"store counts: value serde int -> json: needs a migration and none is declared",
    ):
        _steps(Version(), Version(counts_value_serde="json"), set())


def test_migrations_of_stores_that_are_not_carried_are_refused() -> None:
    with pytest.raises(MigrationError, match="store lengths: a migration is declared but the old"):
        _steps(Version(), Version(lengths=True), {"lengths"})
    with pytest.raises(MigrationError, match="store per-minute: a migration is declared but this"):
        _steps(Version(), Version(per_minute=False), {"per-minute"})


def test_an_unlogged_old_store_is_refused_a_partition_count_change_is_not_a_stores() -> None:
    with pytest.raises(MigrationError, match="store counts: the old version does not log it"):
        _steps(Version(counts_logging=False), Version(), set())
    # Whether state can move across tasks is the re-keying plan's (test_rekeying.py).
    steps = _steps(Version(), Version(), set(), old_partitions=2)
    assert steps["counts"] is StoreAction.COPY
