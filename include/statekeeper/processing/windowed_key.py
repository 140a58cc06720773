"""Keys of windowed tables: the record key plus the window it belongs to."""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from statekeeper.stores.serdes import Serde, SerdeError, serde_for

_U64 = struct.Struct(">Q")


class Windowed(NamedTuple):
    """``key`` in the window ``[start, end)`` (ms)."""

    key: Any
    start: int
    end: int


class WindowedSerde:
    """Kafka Streams' time-windowed serde layout: inner key bytes + 8-byte window start.

    The end is derived from ``window_size_ms`` when reading, as in Kafka Streams.
    """

    def __init__(self, inner: str | Serde[Any], window_size_ms: int) -> None:
        self.inner = serde_for(inner)
        self.window_size_ms = window_size_ms

    def serialize(self, value: Windowed) -> bytes:
        if not isinstance(value, Windowed):
            raise SerdeError(f"WindowedSerde expects Windowed, got {type(value).__name__}")
        return self.inner.serialize(value.key) + _U64.pack(value.start)

    def deserialize(self, data: bytes) -> Windowed:
        if len(data) < 8:
            raise SerdeError(f"windowed key too short: {data[:16]!r}")
        start = _U64.unpack(data[-8:])[0]
        return Windowed(self.inner.deserialize(data[:-8]), start, start + self.window_size_ms)
