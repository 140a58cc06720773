"""Change-logging layer: every write to the inner store is also sent to the changelog."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import itemgetter

from statekeeper.stores.base import KeyValueBytesStore, Value, WrappedKeyValueStore
from statekeeper.stores.lru import LRUKeyValueStore
from statekeeper.stores.window_bytes import WindowBytesStore, changelog_window_key

# Receives (changelog key, absolute value or None for a tombstone). A sink with a
# ``send_all(items)`` method gets a batch's records in one call.
ChangelogSink = Callable[[bytes, Value], None]

RESERVED_KEY_PREFIX = b"\x00__statekeeper."
_first = itemgetter(0)


def check_key(store: str, key: bytes) -> None:
    """Reject keys in the namespace reserved for commit markers."""
    if key.startswith(RESERVED_KEY_PREFIX):
        raise ValueError(
            f"store {store!r}: keys starting with {RESERVED_KEY_PREFIX!r} are reserved for "
            "changelog commit markers"
        )


class ChangeLoggingKeyValueStore(WrappedKeyValueStore):
    """Logs absolute values (invariant 1): replaying a record twice is harmless."""

    def __init__(self, wrapped: KeyValueBytesStore, sink: ChangelogSink) -> None:
        super().__init__(wrapped)
        self._sink = sink
        self._sink_all: Callable[[list[tuple[bytes, Value]]], None] = getattr(
            sink, "send_all", self._send_each
        )
        self._logs_evictions = isinstance(wrapped, LRUKeyValueStore)
        if self._logs_evictions:
            # An evicted key must not come back on restore: log its removal.
            wrapped.add_eviction_listener(lambda key, _value: sink(key, None))

    def put(self, key: bytes, value: Value) -> None:
        check_key(self.name, key)
        self.wrapped.put(key, value)
        self._sink(key, value)

    def put_all(self, items: Iterable[tuple[bytes, Value]]) -> None:
        if not isinstance(items, list):
            items = list(items)
        if self._logs_evictions:
            # Each put must be logged before the next one can evict it, or an evicted key's
            # put would land after its tombstone and come back on restore.
            for key, value in items:
                self.put(key, value)
            return
        # A reserved key starts with b"\x00": when the smallest key does not, none does.
        if items and min(map(_first, items)) < b"\x01":
            for key, _ in items:
                check_key(self.name, key)
        self.wrapped.put_all(items)
        self._sink_all(items)

    def _send_each(self, items: list[tuple[bytes, Value]]) -> None:
        sink = self._sink
        for key, value in items:
            sink(key, value)

    def delete_range(self, start: bytes, end: bytes) -> None:
        # Logged key by key: a compacted changelog has no range tombstones.
        for key, _ in list(self.wrapped.range(start, end)):
            if key < end:
                self._sink(key, None)
        self.wrapped.delete_range(start, end)


class ChangeLoggingWindowStore:
    """Logs ``key | window_start`` → value for every accepted window write.

    Expired segments are not tombstoned key by key: the window changelog is created with
    ``cleanup.policy=compact,delete`` and a retention derived from the store's, and a
    restore drops windows past retention (WindowBytesStore.finish_restore).
    """

    def __init__(self, wrapped: WindowBytesStore, sink: ChangelogSink) -> None:
        self.wrapped = wrapped
        self.name = wrapped.name
        self.persistent = wrapped.persistent
        self._sink = sink

    def put(self, key: bytes, value: Value, window_start: int) -> bool:
        check_key(self.name, key)
        if self.wrapped.put(key, value, window_start):
            self._sink(changelog_window_key(key, window_start), value)
            return True
        return False

    def __getattr__(self, item: str):
        # Reads, commit and restore pass straight through to the window store.
        return getattr(self.wrapped, item)
