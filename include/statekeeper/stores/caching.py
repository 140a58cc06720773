"""Record cache: absorbs repeated updates to a key and forwards only the last on flush."""

from __future__ import annotations

from collections.abc import Iterator

from statekeeper.stores.base import (
    KeyValueBytesStore,
    StoreMetadata,
    Value,
    WrappedKeyValueStore,
    in_range,
    merge_overlay,
)
from statekeeper.stores.change_logging import check_key

_ENTRY_OVERHEAD = 64  # rough per-entry bookkeeping cost, so tiny values still count


class CachingKeyValueStore(WrappedKeyValueStore):
    """Write-back cache bounded by bytes. Flushed on commit and whenever it grows past
    ``max_bytes``, so ten updates of one key in a batch cost one changelog record."""

    def __init__(self, wrapped: KeyValueBytesStore, max_bytes: int) -> None:
        super().__init__(wrapped)
        self.max_bytes = max_bytes
        self._dirty: dict[bytes, Value] = {}
        self._bytes = 0
        self.hits = 0
        self.misses = 0
        self.flushes = 0

    @staticmethod
    def _size(key: bytes, value: Value) -> int:
        return len(key) + (len(value) if value is not None else 0) + _ENTRY_OVERHEAD

    def get(self, key: bytes) -> bytes | None:
        if key in self._dirty:
            self.hits += 1
            return self._dirty[key]
        self.misses += 1
        return self.wrapped.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        dirty = self._dirty
        missing = [k for k in keys if k not in dirty]
        found = dict(zip(missing, self.wrapped.get_many(missing), strict=True)) if missing else {}
        self.hits += len(keys) - len(missing)
        self.misses += len(missing)
        return [dirty[k] if k in dirty else found[k] for k in keys]

    def put(self, key: bytes, value: Value) -> None:
        # Rejected here, not at flush: a bad key in the cache would fail every later commit.
        check_key(self.name, key)
        old = self._dirty.get(key, _ABSENT)
        if old is not _ABSENT:
            self._bytes -= self._size(key, old)  # type: ignore[arg-type]
        self._dirty[key] = value
        self._bytes += self._size(key, value)
        if self._bytes > self.max_bytes:
            self.flush()

    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        overlay = sorted(
            ((k, v) for k, v in self._dirty.items() if in_range(k, start, end)), reverse=reverse
        )
        base = self.wrapped.range(start, end, reverse=reverse)
        return merge_overlay(base, overlay, reverse=reverse) if overlay else base

    def delete_range(self, start: bytes, end: bytes) -> None:
        self.flush()
        self.wrapped.delete_range(start, end)

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries() + len(self._dirty)

    def flush(self) -> None:
        if self._dirty:
            self.flushes += 1
            self.wrapped.put_all(self._dirty.items())
            self._dirty = {}
            self._bytes = 0
        self.wrapped.flush()

    def commit(self, metadata: StoreMetadata) -> None:
        self.flush()
        self.wrapped.commit(metadata)

    def discard(self) -> None:
        self._dirty = {}
        self._bytes = 0
        self.wrapped.discard()

    def wipe(self) -> None:
        self._dirty = {}
        self._bytes = 0
        self.wrapped.wipe()

    def close(self) -> None:
        self._dirty = {}
        self.wrapped.close()


_ABSENT = object()
