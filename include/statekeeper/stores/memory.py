"""Ordered in-memory key-value store; lost on restart, so always fully restored."""

from __future__ import annotations

from collections.abc import Iterator

from sortedcontainers import SortedDict

from statekeeper.stores.base import (
    ClosableMixin,
    KeyValueBytesStore,
    StoreMetadata,
    Value,
    VolatileMetadataMixin,
)


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

    def put(self, key: bytes, value: Value) -> None:
        self._check_open()
        if value is None:
            self._data.pop(key, None)
        else:
            self._data[key] = value

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
        for key, value in records:
            self.put(key, value)
        if metadata is not None:
            self.commit(metadata)

    def wipe(self) -> None:
        self._data.clear()
        self._metadata = StoreMetadata()

    def close(self) -> None:
        self._closed = True
