"""Metered layer: the typed face of a store (serdes) that counts and times every operation."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from itertools import islice
from operator import itemgetter
from typing import Any, Generic, TypeVar

from statekeeper.stores.base import KeyValueBytesStore, StoreMetadata, has_none
from statekeeper.stores.metrics import StoreMetrics
from statekeeper.stores.serdes import Serde, SerdeError, deserialize_all, serialize_all
from statekeeper.stores.window_bytes import split_changelog_window_key

_first, _second = itemgetter(0), itemgetter(1)
K = TypeVar("K")
V = TypeVar("V")


class _Timer:
    __slots__ = ("metrics", "op", "n", "t0")

    def __init__(self, metrics: StoreMetrics, op: str, n: int = 1) -> None:
        self.metrics, self.op, self.n = metrics, op, n

    def __enter__(self) -> None:
        self.t0 = time.perf_counter_ns()

    def __exit__(self, *exc: object) -> None:
        self.metrics.op(self.op).record(time.perf_counter_ns() - self.t0, self.n)


class _TypedStore:
    def __init__(self, name: str, key_serde: Serde[Any], value_serde: Serde[Any]) -> None:
        self.name = name
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.metrics = StoreMetrics(name)

    def _value(self, data: bytes | None, key: object) -> Any:
        if data is None:
            return None
        try:
            return self.value_serde.deserialize(data)
        except SerdeError as exc:
            raise SerdeError(f"store {self.name!r}, key {key!r}: stored value: {exc}") from exc

    # Lifecycle, driven by the task state manager; `wrapped` is set by the subclass.
    wrapped: Any

    def approximate_num_entries(self) -> int:
        return self.wrapped.approximate_num_entries()

    def flush(self) -> None:
        with _Timer(self.metrics, "flush"):
            self.wrapped.flush()

    def commit(self, metadata: StoreMetadata) -> None:
        with _Timer(self.metrics, "commit"):
            self.wrapped.commit(metadata)

    def discard(self) -> None:
        self.wrapped.discard()

    def read_metadata(self) -> StoreMetadata:
        return self.wrapped.read_metadata()

    def restore_batch(
        self, records: list[tuple[bytes, bytes | None]], metadata: StoreMetadata | None
    ) -> None:
        self.wrapped.restore_batch(records, metadata)

    def finish_restore(self) -> None:
        self.wrapped.finish_restore()

    def wipe(self) -> None:
        self.wrapped.wipe()

    def close(self) -> None:
        self.wrapped.close()

    def _key(self, data: bytes) -> Any:
        try:
            return self.key_serde.deserialize(data)
        except SerdeError as exc:
            raise SerdeError(f"store {self.name!r}: stored key: {exc}") from exc


class KeyValueStore(_TypedStore, Generic[K, V]):
    """A typed key-value store: the object processors use (``context.get_state_store``)."""

    def __init__(
        self, wrapped: KeyValueBytesStore, key_serde: Serde[Any], value_serde: Serde[Any]
    ) -> None:
        super().__init__(wrapped.name, key_serde, value_serde)
        self.wrapped = wrapped
        self.persistent = wrapped.persistent

    def get(self, key: K) -> V | None:
        with _Timer(self.metrics, "get"):
            return self._value(self.wrapped.get(self.key_serde.serialize(key)), key)

    def get_many(self, keys: list[K]) -> list[V | None]:
        with _Timer(self.metrics, "get", len(keys)):
            raw = self.wrapped.get_many(serialize_all(self.key_serde, keys))
            found = [v for v in raw if v is not None] if has_none(raw) else raw
            try:
                decoded = iter(deserialize_all(self.value_serde, found))
            except SerdeError:  # redone value by value, to name the key in the error
                return [self._value(v, k) for k, v in zip(keys, raw, strict=True)]
            if len(found) == len(raw):
                return list(decoded)
            return [None if v is None else next(decoded) for v in raw]

    def decode_entries(self, raw: list[tuple[bytes, bytes]]) -> tuple[list[K], list[V]]:
        """Stored ``(key, value)`` bytes as a column of keys and one of values, decoded
        with the serdes in bulk (a bad entry is named as :meth:`get` names it)."""
        with _Timer(self.metrics, "all_entries", len(raw)):
            try:
                return (
                    deserialize_all(self.key_serde, list(map(_first, raw))),
                    deserialize_all(self.value_serde, list(map(_second, raw))),
                )
            except SerdeError:  # redone entry by entry, to name the key in the error
                keys = [self._key(k) for k, _ in raw]
                return keys, [self._value(v, k) for k, (_, v) in zip(keys, raw, strict=True)]

    def put(self, key: K, value: V | None) -> None:
        """Write ``value``; ``None`` deletes the key (a tombstone in the changelog)."""
        with _Timer(self.metrics, "put"):
            self.wrapped.put(
                self.key_serde.serialize(key),
                None if value is None else self.value_serde.serialize(value),
            )

    def put_all(self, items: list[tuple[K, V | None]]) -> None:
        if items:
            self.put_columns(list(map(_first, items)), list(map(_second, items)))

    def put_columns(self, keys: list[K], values: list[V | None]) -> None:
        """``put_all(zip(keys, values))`` for callers that hold keys and values as two
        lists (a batch aggregation), without building and splitting the pairs."""
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        with _Timer(self.metrics, "put", len(keys)):
            if not keys:
                return
            raw_keys = serialize_all(self.key_serde, keys)
            if has_none(values):  # tombstones stay None
                vs = self.value_serde.serialize
                raw_values = [None if v is None else vs(v) for v in values]
            else:
                raw_values = serialize_all(self.value_serde, values)
            self.wrapped.put_all(list(zip(raw_keys, raw_values, strict=True)))

    def put_if_absent(self, key: K, value: V) -> V | None:
        with _Timer(self.metrics, "put_if_absent"):
            old = self.wrapped.put_if_absent(
                self.key_serde.serialize(key), self.value_serde.serialize(value)
            )
            return self._value(old, key)

    def delete(self, key: K) -> V | None:
        with _Timer(self.metrics, "delete"):
            return self._value(self.wrapped.delete(self.key_serde.serialize(key)), key)

    def _typed(self, it: Iterator[tuple[bytes, bytes]], op: str) -> Iterator[tuple[K, V]]:
        t0 = time.perf_counter_ns()
        n = 0
        for k, v in it:
            n += 1
            key = self._key(k)
            yield key, self._value(v, key)
        self.metrics.op(op).record(time.perf_counter_ns() - t0, 1)
        self.metrics.op(f"{op}_entries").record(0, n)

    def range(
        self, start: K | None, end: K | None, *, reverse: bool = False
    ) -> Iterator[tuple[K, V]]:
        """Entries with ``start <= key <= end`` in serialized-key order."""
        lo = None if start is None else self.key_serde.serialize(start)
        hi = None if end is None else self.key_serde.serialize(end)
        return self._typed(self.wrapped.range(lo, hi, reverse=reverse), "range")

    def prefix_scan(self, prefix: K) -> Iterator[tuple[K, V]]:
        """Entries whose serialized key starts with the serialized ``prefix`` (str/bytes keys)."""
        return self._typed(
            self.wrapped.prefix_scan(self.key_serde.serialize(prefix)), "prefix_scan"
        )

    def all(self) -> Iterator[tuple[K, V]]:
        return self._typed(self.wrapped.all(), "all")

    def committed_value(self, changelog_key: bytes) -> bytes | None:
        """The value this store holds for a changelog key (used to revert an uncommitted tail)."""
        return self.wrapped.get(changelog_key)


class WindowStore(_TypedStore, Generic[K, V]):
    """A typed window store: values per (key, window start)."""

    def __init__(self, wrapped: Any, key_serde: Serde[Any], value_serde: Serde[Any]) -> None:
        super().__init__(wrapped.name, key_serde, value_serde)
        self.wrapped = wrapped
        self.persistent = wrapped.persistent

    def put(self, key: K, value: V | None, window_start: int) -> bool:
        """Write a window's value; False when the window is already past retention."""
        with _Timer(self.metrics, "put"):
            return self.wrapped.put(
                self.key_serde.serialize(key),
                None if value is None else self.value_serde.serialize(value),
                window_start,
            )

    def fetch(self, key: K, window_start: int) -> V | None:
        with _Timer(self.metrics, "fetch"):
            return self._value(self.wrapped.fetch(self.key_serde.serialize(key), window_start), key)

    def fetch_range(self, key: K, time_from: int, time_to: int) -> Iterator[tuple[int, V]]:
        with _Timer(self.metrics, "fetch_range"):
            rows = list(self.wrapped.fetch_range(self.key_serde.serialize(key), time_from, time_to))
        return ((start, self._value(v, key)) for start, v in rows)

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[K, int, V]]:
        for k, start, v in self.wrapped.fetch_all(time_from, time_to):
            key = self._key(k)
            yield key, start, self._value(v, key)

    def all(self) -> Iterator[tuple[K, int, V]]:
        return self.fetch_all(0, 2**63 - 1)

    @property
    def observed_stream_time(self) -> int:
        return self.wrapped.observed_stream_time

    def committed_value(self, changelog_key: bytes) -> bytes | None:
        """The value this store holds for a changelog key (used to revert an uncommitted tail)."""
        key, window_start = split_changelog_window_key(changelog_key)
        return self.wrapped.fetch(key, window_start)


def typed_entries(
    store: KeyValueStore[Any, Any] | WindowStore[Any, Any],
) -> Iterator[tuple[Any, Any]]:
    """An open typed store's entries decoded with its serdes, as :func:`put_entries` takes
    them: a window store's keys are ``(key, window_start)``."""
    if isinstance(store, WindowStore):
        return (((key, start), value) for key, start, value in store.all())
    columns = entry_columns(store)
    return (pair for keys, values in columns for pair in zip(keys, values, strict=True))


#: Entries per chunk of :func:`entry_columns` and per ``put_all`` of :func:`put_entries`.
PUT_CHUNK = 10_000


def entry_columns(
    store: KeyValueStore[Any, Any], size: int = PUT_CHUNK
) -> Iterator[tuple[list[Any], list[Any]]]:
    """An open typed key-value store's entries in key order, as ``(keys, values)`` columns
    of up to ``size`` entries decoded in bulk (a whole-store read: a migration, a check)."""
    raw = store.wrapped.all()
    while chunk := list(islice(raw, size)):
        yield store.decode_entries(chunk)


def put_entries(
    store: KeyValueStore[Any, Any] | WindowStore[Any, Any], entries: Iterable[tuple[Any, Any]]
) -> tuple[int, int]:
    """Write ``entries`` into an open typed store, in chunks for a key-value store (a window
    store's keys are ``(key, window_start)``); ``(written, dropped)``: dropped are window
    entries past the store's retention."""
    written = dropped = 0
    if isinstance(store, WindowStore):
        for (key, window_start), value in entries:
            if store.put(key, value, window_start):
                written += 1
            else:
                dropped += 1
        return written, dropped
    iterator = iter(entries)
    while chunk := list(islice(iterator, PUT_CHUNK)):
        store.put_all(chunk)
        written += len(chunk)
    return written, dropped
