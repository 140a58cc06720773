"""Fixed-capacity in-memory store that evicts the least recently used key."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator

from statekeeper.errors import InvalidStoreConfigError
from statekeeper.stores.base import (
    ClosableMixin,
    KeyValueBytesStore,
    StoreMetadata,
    Value,
    VolatileMetadataMixin,
    in_range,
)

EvictionListener = Callable[[bytes, bytes], None]


class LRUKeyValueStore(VolatileMetadataMixin, ClosableMixin, KeyValueBytesStore):
    """At most ``capacity`` entries; a put beyond it evicts the least recently used one.

    Evictions are reported to listeners (the change-logging layer logs them as tombstones,
    so a restore never brings an evicted key back).
    """

    persistent = False

    def __init__(self, name: str, capacity: int) -> None:
        if capacity < 1:
            raise InvalidStoreConfigError(
                f"LRU store {name!r}: capacity must be >= 1, got {capacity}"
            )
        self.name = name
        self.capacity = capacity
        self._data: OrderedDict[bytes, bytes] = OrderedDict()
        self._metadata = StoreMetadata()
        self._eviction_listeners: list[EvictionListener] = []

    def add_eviction_listener(self, listener: EvictionListener) -> None:
        self._eviction_listeners.append(listener)

    def get(self, key: bytes) -> bytes | None:
        self._check_open()
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: bytes, value: Value) -> None:
        self._check_open()
        if value is None:
            self._data.pop(key, None)
            return
        self._data[key] = value
        self._data.move_to_end(key)
        while len(self._data) > self.capacity:
            evicted_key, evicted_value = self._data.popitem(last=False)
            for listener in self._eviction_listeners:
                listener(evicted_key, evicted_value)

    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        # Scans do not count as use: recency is left as it is.
        keys = sorted((k for k in self._data if in_range(k, start, end)), reverse=reverse)
        for key in keys:
            value = self._data.get(key)
            if value is not None:
                yield key, value

    def approximate_num_entries(self) -> int:
        return len(self._data)

    def restore_batch(
        self, records: list[tuple[bytes, Value]], metadata: StoreMetadata | None
    ) -> None:
        # Evictions were logged as tombstones when they happened, but a restore replays puts in
        # changelog order, not access order: evicting now could drop a live key. Capacity is
        # enforced once the whole changelog has been applied (finish_restore).
        for key, value in records:
            if value is None:
                self._data.pop(key, None)
            else:
                self._data[key] = value
                self._data.move_to_end(key)
        if metadata is not None:
            self.commit(metadata)

    def finish_restore(self) -> None:
        while len(self._data) > self.capacity:
            self._data.popitem(last=False)

    def wipe(self) -> None:
        self._data.clear()
        self._metadata = StoreMetadata()

    def close(self) -> None:
        self._closed = True
