"""Custom store suppliers the store tests run besides the built-in kinds.

- :class:`SQLiteStoreSupplier`: the worked example of spark_apps/word_count_sqlite
  (persistent, with a read-only view).
- :class:`StagingMemoryStoreSupplier`: a non-persistent engine, the smallest store that keeps
  the custom-store contract (writes staged until commit, discard drops them). The built-in
  in-memory store does not stage, so it is no custom store: test_supplier_contract.py shows
  the probe refusing it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from spark_apps.word_count_sqlite.sqlite_store import SQLiteStoreSupplier
from statekeeper.stores.base import (
    ClosableMixin,
    KeyValueBytesStore,
    StoreMetadata,
    Value,
    in_range,
    merge_overlay,
)
from statekeeper.stores.memory import InMemoryKeyValueStore
from statekeeper.stores.supplier import StoreSupplier

__all__ = ["SQLiteStoreSupplier", "StagingMemoryStore", "StagingMemoryStoreSupplier"]


class StagingMemoryStore(ClosableMixin, KeyValueBytesStore):
    """Committed entries in an in-memory store, writes staged in a dict until commit."""

    persistent = False

    def __init__(self, name: str) -> None:
        self.name = name
        self.committed = InMemoryKeyValueStore(name)
        self.pending: dict[bytes, Value] = {}

    def get(self, key: bytes) -> bytes | None:
        self._check_open()
        if key in self.pending:
            return self.pending[key]
        return self.committed.get(key)

    def put(self, key: bytes, value: Value) -> None:
        self._check_open()
        self.pending[key] = value

    def put_all(self, items: Iterable[tuple[bytes, Value]]) -> None:
        self._check_open()
        self.pending.update(items)

    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        overlay = sorted(
            (item for item in self.pending.items() if in_range(item[0], start, end)),
            reverse=reverse,
        )
        base = self.committed.range(start, end, reverse=reverse)
        return merge_overlay(base, overlay, reverse=reverse)

    def approximate_num_entries(self) -> int:
        self._check_open()
        return sum(1 for _ in self.range(None, None))

    def commit(self, metadata: StoreMetadata) -> None:
        self._check_open()
        self.committed.put_all(list(self.pending.items()))
        self.pending = {}
        self.committed.commit(metadata)

    def read_metadata(self) -> StoreMetadata:
        self._check_open()
        return self.committed.read_metadata()

    def restore_batch(
        self, records: list[tuple[bytes, Value]], metadata: StoreMetadata | None
    ) -> None:
        self._check_open()
        self.committed.restore_batch(records, metadata)

    def discard(self) -> None:
        self.pending.clear()

    def wipe(self) -> None:
        self.pending.clear()
        self.committed.wipe()

    def close(self) -> None:
        self._closed = True
        self.pending.clear()
        self.committed.close()


@dataclass(frozen=True)
class StagingMemoryStoreSupplier(StoreSupplier):
    """``Stores.custom(name, StagingMemoryStoreSupplier())``: a non-persistent custom engine
    (rebuilt from the changelog at every open, like the built-in in-memory store)."""

    engine = "staging-memory"
    persistent = False

    def get(self, name: str, directory: Path) -> StagingMemoryStore:
        return StagingMemoryStore(name)
