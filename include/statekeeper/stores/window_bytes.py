"""Window store: values per (key, window start), in time segments dropped past retention.

Entries live in any :class:`KeyValueBytesStore` (RocksDB or in-memory) under the key
``segment(8) | len(key)(4) | key | window_start(8)``, so one range delete drops every
expired segment and a fetch by key scans only the segments in the time range. The changelog
key is ``key | window_start(8)``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from statekeeper.errors import ChangelogCorruptError
from statekeeper.stores.base import StoreMetadata, Value

_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_OBSERVED_TIME_KEY = b"\xff" * 8 + b"observed-stream-time"
_NO_TIME = -1


def changelog_window_key(key: bytes, window_start: int) -> bytes:
    return key + _U64.pack(window_start)


def split_changelog_window_key(data: bytes) -> tuple[bytes, int]:
    if data is None or len(data) < 8:
        raise ChangelogCorruptError(f"window changelog key too short to hold a timestamp: {data!r}")
    return data[:-8], _U64.unpack(data[-8:])[0]


class WindowBytesStore:
    """Segmented window store over a byte key-value store (see module docstring)."""

    def __init__(
        self,
        name: str,
        inner,  # KeyValueBytesStore
        *,
        retention_ms: int,
        window_size_ms: int,
        segment_interval_ms: int | None = None,
    ) -> None:
        self.name = name
        self.inner = inner
        self.persistent = inner.persistent
        self.retention_ms = retention_ms
        self.window_size_ms = window_size_ms
        # As in Kafka Streams: about two live segments per retention period, at least 60 s.
        self.segment_interval_ms = segment_interval_ms or max(retention_ms // 2, 60_000)
        self.expired_records_dropped = 0
        self._observed = self._load_observed_time()

    # -- keys ------------------------------------------------------------------------------

    def _segment(self, window_start: int) -> int:
        return window_start // self.segment_interval_ms

    def _store_key(self, key: bytes, window_start: int) -> bytes:
        return (
            _U64.pack(self._segment(window_start))
            + _U32.pack(len(key))
            + key
            + _U64.pack(window_start)
        )

    @staticmethod
    def _split_store_key(data: bytes) -> tuple[bytes, int]:
        length = _U32.unpack_from(data, 8)[0]
        return data[12 : 12 + length], _U64.unpack_from(data, 12 + length)[0]

    # -- stream time and retention ---------------------------------------------------------

    def _load_observed_time(self) -> int:
        raw = self.inner.get(_OBSERVED_TIME_KEY)
        return _U64.unpack(raw)[0] if raw else _NO_TIME

    @property
    def observed_stream_time(self) -> int:
        """Largest window start seen; -1 before the first write."""
        return self._observed

    def _min_live_start(self) -> int:
        return self._observed - self.retention_ms + 1

    def is_expired(self, window_start: int) -> bool:
        return self._observed != _NO_TIME and window_start < self._min_live_start()

    def _advance(self, window_start: int) -> bool:
        """Move stream time forward; return True when that expired whole segments."""
        if window_start <= self._observed:
            return False
        old_min_segment = self._segment(max(0, self._min_live_start()))
        self._observed = window_start
        return self._segment(max(0, self._min_live_start())) > old_min_segment

    def _drop_expired_segments(self) -> None:
        if self._observed == _NO_TIME:
            return
        min_segment = self._segment(max(0, self._min_live_start()))
        if min_segment > 0:
            self.inner.delete_range(_U64.pack(0), _U64.pack(min_segment))

    def _observed_record(self) -> tuple[bytes, bytes]:
        return _OBSERVED_TIME_KEY, _U64.pack(self._observed)

    # -- writes and reads ------------------------------------------------------------------

    def put(self, key: bytes, value: Value, window_start: int) -> bool:
        """Write a window's value; returns False (and writes nothing) for an expired window."""
        if window_start < 0:
            raise ValueError(f"window start must be >= 0, got {window_start}")
        if self.is_expired(window_start):
            self.expired_records_dropped += 1
            return False
        expired_segments = self._advance(window_start)
        self.inner.put(self._store_key(key, window_start), value)
        self.inner.put(*self._observed_record())
        if expired_segments:
            self._drop_expired_segments()
        return True

    def fetch(self, key: bytes, window_start: int) -> bytes | None:
        if self.is_expired(window_start):
            return None
        return self.inner.get(self._store_key(key, window_start))

    def fetch_range(self, key: bytes, time_from: int, time_to: int) -> Iterator[tuple[int, bytes]]:
        """``(window_start, value)`` for ``key`` with ``time_from <= start <= time_to``."""
        time_from = max(time_from, self._min_live_start(), 0)
        time_to = min(time_to, self._observed)  # no window starts after stream time
        if time_to < time_from:
            return
        for segment in range(self._segment(time_from), self._segment(time_to) + 1):
            prefix = _U64.pack(segment) + _U32.pack(len(key)) + key
            lo = prefix + _U64.pack(max(time_from, 0))
            hi = prefix + _U64.pack(time_to)
            for store_key, value in self.inner.range(lo, hi):
                yield self._split_store_key(store_key)[1], value

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[bytes, int, bytes]]:
        """``(key, window_start, value)`` of every window starting in the time range."""
        time_from = max(time_from, self._min_live_start(), 0)
        if time_to < time_from:
            return
        lo = _U64.pack(self._segment(time_from))
        hi = _U64.pack(self._segment(time_to) + 1)
        for store_key, value in self.inner.range(lo, hi):
            if store_key >= hi:
                break
            key, start = self._split_store_key(store_key)
            if time_from <= start <= time_to:
                yield key, start, value

    def all(self) -> Iterator[tuple[bytes, int, bytes]]:
        return self.fetch_all(0, 2**63 - 1)

    def approximate_num_entries(self) -> int:
        return max(0, self.inner.approximate_num_entries() - 1)

    # -- commit and restore ----------------------------------------------------------------

    def flush(self) -> None:
        self.inner.flush()

    def commit(self, metadata: StoreMetadata) -> None:
        self.inner.commit(metadata)

    def read_metadata(self) -> StoreMetadata:
        return self.inner.read_metadata()

    def restore_batch(
        self, records: list[tuple[bytes, Value]], metadata: StoreMetadata | None
    ) -> None:
        converted = []
        for changelog_key, value in records:
            key, start = split_changelog_window_key(changelog_key)
            self._advance(start)
            converted.append((self._store_key(key, start), value))
        if self._observed != _NO_TIME:  # a store that saw no window yet has no stream time
            converted.append(self._observed_record())
        self.inner.restore_batch(converted, metadata)

    def discard(self) -> None:
        self.inner.discard()
        self._observed = self._load_observed_time()

    def finish_restore(self) -> None:
        # Windows replayed from the changelog may already be past retention (an
        # uncompacted changelog keeps them forever): drop them now.
        self._drop_expired_segments()
        self.inner.commit(self.inner.read_metadata())

    def wipe(self) -> None:
        self.inner.wipe()
        self._observed = _NO_TIME
        self.expired_records_dropped = 0

    def close(self) -> None:
        self.inner.close()
