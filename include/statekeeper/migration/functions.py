"""A store's migration function and how it is applied to the old entries.

Two kinds, declared per store in the new version's spec (``migrations:``):

* ``record``: ``migrate(key, value) -> (key, value) | None``, called once per old entry
  (decoded with the old serdes); None drops the key. For a window store the key is the pair
  ``(key, window_start)`` and so is the key returned.
* ``store``: ``migrate_store(items) -> items``, called once per task with every old entry as
  an iterable of ``(key, value)`` pairs; whatever it yields is the new store (re-keying,
  merging, splitting).

A returned key that appears twice keeps its last value. Pure: no Kafka, no files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from statekeeper.errors import StatekeeperError

MigrationKind = Literal["record", "store"]


class MigrationError(StatekeeperError):
    """A migration cannot run, or its function failed; the message names the store (and the
    task or key where it happened)."""


class MigrationRefused(MigrationError):
    """The two versions' state cannot be migrated as declared (a store needs a migration
    none is declared for, repartitioning, ...): nothing was written."""


@dataclass(frozen=True)
class StoreMigration:
    """One store's migration: its kind, the function and where it was declared (``ref``)."""

    store: str
    kind: MigrationKind
    function: Callable[..., Any]
    ref: str = ""


@dataclass
class StoreCounts:
    """What migrating one store of one task did: old entries read, new entries written,
    old entries dropped (a per-record migration returned None)."""

    read: int = 0
    written: int = 0
    dropped: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"read": self.read, "written": self.written, "dropped": self.dropped}


def migrated_entries(
    migration: StoreMigration, entries: Iterable[tuple[Any, Any]], counts: StoreCounts
) -> Iterator[tuple[Any, Any]]:
    """The new entries of one store from its old ``entries``, counting into ``counts``
    (``written`` is counted by the caller, which writes them)."""
    if migration.kind == "record":
        return _per_record(migration, entries, counts)
    return _whole_store(migration, entries, counts)


def _per_record(
    migration: StoreMigration, entries: Iterable[tuple[Any, Any]], counts: StoreCounts
) -> Iterator[tuple[Any, Any]]:
    for key, value in entries:
        counts.read += 1
        try:
            result = migration.function(key, value)
        except Exception as exc:
            raise MigrationError(
                f"store {migration.store}: {_name(migration)} raised {type(exc).__name__}: "
                f"{exc} on key {key!r}"
            ) from exc
        if result is None:
            counts.dropped += 1
            continue
        yield _pair(migration, result, key)


def migrated_columns(
    migration: StoreMigration, keys: list[Any], values: list[Any], counts: StoreCounts
) -> tuple[list[Any], list[Any]]:
    """A per-record migration over a chunk of old entries held as columns: the new keys and
    values, counting reads and drops into ``counts`` (as :func:`migrated_entries` does)."""
    try:
        results = list(map(migration.function, keys, values))
        if None in results:
            results = [r for r in results if r is not None]
        pairs = set(map(type, results)) <= {tuple} and set(map(len, results)) <= {2}
    except Exception:
        pairs = False
    if not pairs:  # redone record by record, to name the key in the error
        list(_per_record(migration, zip(keys, values, strict=True), StoreCounts()))
        raise MigrationError(
            f"store {migration.store}: {_name(migration)} failed on a chunk of entries but "
            "not when called again entry by entry: a migration must be a pure function"
        )
    counts.read += len(keys)
    counts.dropped += len(keys) - len(results)
    if not results:
        return [], []
    new_keys, new_values = zip(*results, strict=True)
    return list(new_keys), list(new_values)


def _whole_store(
    migration: StoreMigration, entries: Iterable[tuple[Any, Any]], counts: StoreCounts
) -> Iterator[tuple[Any, Any]]:
    def counted() -> Iterator[tuple[Any, Any]]:
        for entry in entries:
            counts.read += 1
            yield entry

    try:
        produced = migration.function(counted())
        if produced is None:
            raise MigrationError(
                f"store {migration.store}: {_name(migration)} returned None, not the new "
                "entries (a missing `return`?)"
            )
        for result in produced:
            yield _pair(migration, result, None)
    except MigrationError:
        raise
    except Exception as exc:
        raise MigrationError(
            f"store {migration.store}: {_name(migration)} raised {type(exc).__name__}: {exc}"
        ) from exc


def _pair(migration: StoreMigration, result: Any, key: Any) -> tuple[Any, Any]:
    if isinstance(result, tuple) and len(result) == 2:
        return result
    on = f" for key {key!r}" if key is not None else ""
    raise MigrationError(
        f"store {migration.store}: {_name(migration)} returned {result!r}{on}: expected a "
        "(key, value) pair" + (" or None" if migration.kind == "record" else "")
    )


def _name(migration: StoreMigration) -> str:
    name = getattr(migration.function, "__name__", repr(migration.function))
    return f"migration {name}()" + (f" ({migration.ref})" if migration.ref else "")
