"""The byte-level store contracts every layer and inner store implements."""

from __future__ import annotations

import copy
import dataclasses
import heapq
import json
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import repeat
from operator import is_not
from typing import Any

from statekeeper.errors import StoreClosedError

Value = bytes | None  # None is a tombstone: the key is deleted


@dataclass
class StoreMetadata:
    """What a store knows about how far it is: written atomically with its data (KIP-1035 style).

    ``changelog_offset`` is the offset of the last commit marker applied, ``source_offsets``
    maps "topic:partition" to the next source offset to process.
    """

    changelog_offset: int | None = None
    batch_id: int | None = None
    source_offsets: dict[str, int] = field(default_factory=dict)
    #: Epoch of the last commit marker applied (changelog.fencing): a later read of the
    #: changelog from ``changelog_offset`` starts fenced at it.
    epoch: int = 0
    #: A changelog offset at or below ``changelog_offset`` before which no newer epoch had
    #: begun when this commit was written: reading from it to the marker proves the commit
    #: was not a fenced writer's (changelog.fencing). None: the commit was read from the
    #: changelog itself (already fenced), or written before fencing existed.
    verified_offset: int | None = None

    def to_json(self) -> str:
        """Every field as JSON text: how a kv-dump snapshot, or an engine without a place of
        its own for them, keeps the metadata (read back by :meth:`from_json`)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> StoreMetadata:
        """The metadata :meth:`to_json` wrote; raises ValueError when ``text`` is not that."""
        try:
            raw = json.loads(text)
            raw["source_offsets"] = {str(k): int(v) for k, v in raw["source_offsets"].items()}
            return cls(**raw)
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"not store metadata: {type(exc).__name__}: {exc}") from exc


class KeyValueBytesStore(ABC):
    """A key-value store of bytes. Inner stores and wrapping layers share this contract.

    Writes may be staged until :meth:`commit`, which makes them durable together with the
    metadata. Iterators yield ``(key, value)`` in key order (LRU: key order too).
    """

    name: str
    persistent: bool = False

    @abstractmethod
    def get(self, key: bytes) -> bytes | None: ...

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return [self.get(k) for k in keys]

    @abstractmethod
    def put(self, key: bytes, value: Value) -> None:
        """Write ``value`` under ``key``; ``None`` deletes the key."""

    def put_all(self, items: Iterable[tuple[bytes, Value]]) -> None:
        for key, value in items:
            self.put(key, value)

    def put_if_absent(self, key: bytes, value: bytes) -> bytes | None:
        """Write only when the key is absent; return the existing value otherwise."""
        existing = self.get(key)
        if existing is None:
            self.put(key, value)
        return existing

    def delete(self, key: bytes) -> bytes | None:
        """Delete ``key`` and return its old value."""
        old = self.get(key)
        self.put(key, None)
        return old

    @abstractmethod
    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key <= end`` (``None`` = unbounded), in key order."""

    def prefix_scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for key, value in self.range(prefix, None):
            if not key.startswith(prefix):
                return
            yield key, value

    def all(self) -> Iterator[tuple[bytes, bytes]]:
        return self.range(None, None)

    @abstractmethod
    def approximate_num_entries(self) -> int: ...

    def delete_range(self, start: bytes, end: bytes) -> None:
        """Delete every key with ``start <= key < end``. Used to drop window segments."""
        for key, _ in list(self.range(start, end)):
            if key < end:
                self.put(key, None)

    def flush(self) -> None:
        """Push buffered writes one layer down (caches); the inner store does nothing."""

    @abstractmethod
    def commit(self, metadata: StoreMetadata) -> None:
        """Make all staged writes durable, atomically with ``metadata``."""

    @abstractmethod
    def read_metadata(self) -> StoreMetadata: ...

    @abstractmethod
    def restore_batch(
        self, records: list[tuple[bytes, Value]], metadata: StoreMetadata | None
    ) -> None:
        """Apply changelog records (absolute values) directly, bypassing logging."""

    def discard(self) -> None:
        """Forget writes staged since the last commit (the failed batch is re-run)."""

    def finish_restore(self) -> None:
        """Called once after the last restored batch (LRU trims to capacity, windows expire)."""

    @abstractmethod
    def wipe(self) -> None:
        """Drop every entry and the metadata (local state is rebuilt from the changelog)."""

    @abstractmethod
    def close(self) -> None: ...


class ClosableMixin:
    """Fails loudly on use after close instead of touching freed native handles."""

    _closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store {getattr(self, 'name', '?')!r} is closed")


class WrappedKeyValueStore(KeyValueBytesStore):
    """A layer over another store: delegates everything; subclasses override what they add."""

    def __init__(self, wrapped: KeyValueBytesStore) -> None:
        self.wrapped = wrapped
        self.name = wrapped.name
        self.persistent = wrapped.persistent

    def get(self, key: bytes) -> bytes | None:
        return self.wrapped.get(key)

    def get_many(self, keys: list[bytes]) -> list[bytes | None]:
        return self.wrapped.get_many(keys)

    def put(self, key: bytes, value: Value) -> None:
        self.wrapped.put(key, value)

    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return self.wrapped.range(start, end, reverse=reverse)

    def delete_range(self, start: bytes, end: bytes) -> None:
        self.wrapped.delete_range(start, end)

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries()

    def flush(self) -> None:
        self.wrapped.flush()

    def commit(self, metadata: StoreMetadata) -> None:
        self.wrapped.commit(metadata)

    def read_metadata(self) -> StoreMetadata:
        return self.wrapped.read_metadata()

    def restore_batch(
        self, records: list[tuple[bytes, Value]], metadata: StoreMetadata | None
    ) -> None:
        self.wrapped.restore_batch(records, metadata)

    def finish_restore(self) -> None:
        self.wrapped.finish_restore()

    def discard(self) -> None:
        self.wrapped.discard()

    def wipe(self) -> None:
        self.wrapped.wipe()

    def close(self) -> None:
        self.wrapped.close()


class VolatileMetadataMixin:
    """Metadata of a store that lives only in memory (lost with the process, restored fully)."""

    _metadata: StoreMetadata

    def commit(self, metadata: StoreMetadata) -> None:
        self._metadata = copy.deepcopy(metadata)

    def read_metadata(self) -> StoreMetadata:
        return copy.deepcopy(self._metadata)


def payload_bytes(keys: Iterable[bytes], values: Iterable[Value]) -> int:
    """Bytes of the keys and the non-None values, summed at C speed (``filter(None, ...)``
    skips None, and b"", whose length is 0 anyway)."""
    return sum(map(len, keys)) + sum(map(len, filter(None, values)))


def has_none(column: list[Any]) -> bool:
    """Whether any entry is None, by identity: ``None in column`` would call user types'
    ``__eq__`` (a numpy array's answer has no truth value)."""
    return not all(map(is_not, column, repeat(None)))


def in_range(key: bytes, start: bytes | None, end: bytes | None) -> bool:
    return (start is None or key >= start) and (end is None or key <= end)


def merge_overlay(
    base: Iterator[tuple[bytes, bytes]],
    overlay: list[tuple[bytes, Value]],
    *,
    reverse: bool = False,
) -> Iterator[tuple[bytes, bytes]]:
    """Merge a sorted base iterator with sorted pending writes; pending wins, tombstones hide.

    Both inputs are sorted in the same direction. Used by the caching layer and by the
    RocksDB store's uncommitted write overlay.
    """
    # Tag overlay entries 0 and base entries 1 so that, for equal keys, the overlay comes first.
    if reverse:
        tagged_base = ((_Desc(k), 1, v) for k, v in base)
        tagged_overlay = ((_Desc(k), 0, v) for k, v in overlay)
    else:
        tagged_base = ((k, 1, v) for k, v in base)
        tagged_overlay = ((k, 0, v) for k, v in overlay)
    last: object = _SENTINEL
    for sort_key, _tag, value in heapq.merge(tagged_overlay, tagged_base):
        key = sort_key.key if reverse else sort_key
        if key == last:
            continue
        last = key
        if value is not None:
            yield key, value


_SENTINEL = object()


class _Desc:
    """Inverts bytes ordering for heapq.merge in reverse scans."""

    __slots__ = ("key",)

    def __init__(self, key: bytes) -> None:
        self.key = key

    def __lt__(self, other: _Desc) -> bool:
        return self.key > other.key

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.key == other.key
