"""suppress(until_window_closes): hold each window's latest result until the window closes.

Updates of a windowed table are buffered per (key, window) in a logged key-value store; when
the task's stream time reaches ``window_end + grace`` the window's final value is forwarded
once and removed from the buffer. The buffer survives restarts (it is restored from its
changelog); processors connected to the buffer store get a :class:`SuppressionBuffer` and can
drop a key's pending windows (e.g. on a checkout), so nothing is emitted for them later.

Buffer entry: key ``len(key)(4) | key | window_start(8)``, value
``window_end(8) | timestamp(8) | tombstone flag(1) | value``.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterator
from typing import Any

from statekeeper.processing.nodes import Op
from statekeeper.processing.processor import Processor, ProcessorContext, Record
from statekeeper.processing.windowed_key import Windowed
from statekeeper.stores.serdes import Serde

_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_HEAD = struct.Struct(">QQB")


class SuppressionBuffer:
    """Typed view of a suppression buffer store (what ``get_state_store`` returns for it)."""

    def __init__(self, store: Any, key_serde: Serde[Any], value_serde: Serde[Any]) -> None:
        self.store = store  # KeyValueStore[bytes, bytes]
        self.name = store.name
        self.key_serde = key_serde
        self.value_serde = value_serde

    @staticmethod
    def _prefix(key_bytes: bytes) -> bytes:
        return _U32.pack(len(key_bytes)) + key_bytes

    def put_raw(self, key_bytes: bytes, start: int, end: int, value: Any, timestamp: int) -> None:
        body = b"" if value is None else self.value_serde.serialize(value)
        head = _HEAD.pack(end, max(timestamp, 0), value is None)
        self.store.put(self._prefix(key_bytes) + _U64.pack(start), head + body)

    def get_raw(self, key_bytes: bytes, start: int) -> tuple[int, int, Any] | None:
        raw = self.store.get(self._prefix(key_bytes) + _U64.pack(start))
        return None if raw is None else self._decode(raw)

    def delete_raw(self, key_bytes: bytes, start: int) -> None:
        self.store.delete(self._prefix(key_bytes) + _U64.pack(start))

    def _decode(self, raw: bytes) -> tuple[int, int, Any]:
        end, ts, tombstone = _HEAD.unpack_from(raw)
        return end, ts, None if tombstone else self.value_serde.deserialize(raw[_HEAD.size :])

    def pending(self, key: Any) -> list[tuple[int, int, Any]]:
        """``(window_start, window_end, value)`` of ``key``'s buffered windows."""
        prefix = self._prefix(self.key_serde.serialize(key))
        out = []
        for store_key, raw in self.store.prefix_scan(prefix):
            end, _, value = self._decode(raw)
            out.append((_U64.unpack(store_key[-8:])[0], end, value))
        return out

    def delete(self, key: Any) -> int:
        """Drop every buffered window of ``key``; returns how many were dropped."""
        prefix = self._prefix(self.key_serde.serialize(key))
        keys = [k for k, _ in self.store.prefix_scan(prefix)]
        for k in keys:
            self.store.delete(k)
        return len(keys)

    def entries(self) -> Iterator[tuple[bytes, int, int]]:
        """``(key bytes, window_start, window_end)`` of every buffered window."""
        for store_key, raw in self.store.all():
            length = _U32.unpack_from(store_key)[0]
            key_bytes = store_key[4 : 4 + length]
            start = _U64.unpack_from(store_key, 4 + length)[0]
            yield key_bytes, start, _HEAD.unpack_from(raw)[0]

    def __len__(self) -> int:
        return sum(1 for _ in self.store.all())


class SuppressOp(Op):
    """Suppress a windowed table's updates until each window closes."""

    kind = "KTABLE-SUPPRESS"
    uses_stream_time = True

    def __init__(self, buffer_store: str, grace_ms: int) -> None:
        self.buffer_store = buffer_store
        self.grace_ms = grace_ms

    def create(self) -> Processor:
        return _SuppressProcessor(self)


class _SuppressProcessor(Processor):
    def __init__(self, op: SuppressOp) -> None:
        self.op = op
        self.grace = op.grace_ms
        self._queue: list[tuple[int, bytes, int]] = []  # (window_end, key bytes, start)
        self._queued: set[tuple[bytes, int]] = set()

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.buffer: SuppressionBuffer = context.get_state_store(self.op.buffer_store)
        for key_bytes, start, end in self.buffer.entries():
            self._enqueue(key_bytes, start, end)
        context.on_stream_time_advance(self._emit_closed)  # type: ignore[attr-defined]

    def _enqueue(self, key_bytes: bytes, start: int, end: int) -> None:
        if (key_bytes, start) not in self._queued:
            self._queued.add((key_bytes, start))
            heapq.heappush(self._queue, (end, key_bytes, start))

    def process(self, record: Record) -> None:
        window: Windowed = record.key
        key_bytes = self.buffer.key_serde.serialize(window.key)
        self.buffer.put_raw(key_bytes, window.start, window.end, record.value, record.timestamp)
        self._enqueue(key_bytes, window.start, window.end)

    def _emit_closed(self, stream_time: int) -> None:
        queue, buffer, grace = self._queue, self.buffer, self.grace
        while queue and queue[0][0] + grace <= stream_time:
            end, key_bytes, start = heapq.heappop(queue)
            self._queued.discard((key_bytes, start))
            entry = buffer.get_raw(key_bytes, start)
            if entry is None:  # deleted by another processor (e.g. a checkout)
                continue
            buffer.delete_raw(key_bytes, start)
            _, ts, value = entry
            key = Windowed(buffer.key_serde.deserialize(key_bytes), start, end)
            self.context.forward(Record(key, value, ts))
