"""Ordered in-memory key-value store; lost on restart, so always fully restored."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from operator import itemgetter

from sortedcontainers import SortedDict

from statekeeper.stores.base import (
    ClosableMixin,
    KeyValueBytesStore,
    StoreMetadata,
    Value,
    VolatileMetadataMixin,
    has_none,
)

_first, _second = itemgetter(0), itemgetter(1)


class InMemoryKeyValueStore(VolatileMetadataMixin, ClosableMixin, KeyValueBytesStore):
    """Sorted dict of bytes, so range and prefix scans work as on RocksDB."""

    persistent = False

    def __init__(self, name: str) -> None:
        self.name = name
        self._data: SortedDict = SortedDict()
        self._metadata = StoreMetadata()

    def get(self, key: bytes) -> bytes | None:
        self._check_open()
        return self._data.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        self._check_open()
        return list(map(self._data.get, keys))

    def put(self, key: bytes, value: Value) -> None:
        self._check_open()
        if value is None:
            self._data.pop(key, None)
        else:
            self._data[key] = value

    def put_all(self, items: Iterable[tuple[bytes, Value]]) -> None:
        self._check_open()
        if not isinstance(items, list):
            items = list(items)
        data = self._data
        if has_none(list(map(_second, items))):  # deletes change the key order: one by one
            for key, value in items:
                self.put(key, value)
        elif all(map(data.__contains__, map(_first, items))):
            # Only values change, so the sorted key list stays as it is: set them at dict
            # speed (SortedDict keeps its values in the dict it inherits from).
            dict.update(data, items)
        else:
            data.update(items)

    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        # Snapshot the keys so writes during iteration do not break it.
        keys = list(self._data.irange(start, end, reverse=reverse))
        for key in keys:
            value = self._data.get(key)
            if value is not None:
                yield key, value

    def delete_range(self, start: bytes, end: bytes) -> None:
        for key in list(self._data.irange(start, end, inclusive=(True, False))):
            del self._data[key]

    def approximate_num_entries(self) -> int:
        return len(self._data)

    def restore_batch(
        self, records: list[tuple[bytes, Value]], metadata: StoreMetadata | None
    ) -> None:
        self.put_all(records)
        if metadata is not None:
            self.commit(metadata)

    def wipe(self) -> None:
        self._data.clear()
        self._metadata = StoreMetadata()

    def close(self) -> None:
        self._closed = True
