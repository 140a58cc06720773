"""Restore listeners, mirroring Kafka Streams' StateRestoreListener."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

log = logging.getLogger("statekeeper.restore")


class StateRestoreListener(Protocol):
    """Told when a store's changelog partition starts, advances and finishes restoring.

    ``end_offset`` is the broker's high-watermark estimate; the restore itself always reads
    to partition EOF (invariant 5). ``reason`` says why a restore is full ("no local state",
    "corrupt local state: …").
    """

    def on_restore_start(
        self, partition: tuple[str, int], store: str, start_offset: int, end_offset: int
    ) -> None: ...

    def on_batch_restored(
        self, partition: tuple[str, int], store: str, batch_end_offset: int, num_restored: int
    ) -> None: ...

    def on_restore_end(
        self, partition: tuple[str, int], store: str, total_restored: int
    ) -> None: ...

    def on_restore_reason(self, partition: tuple[str, int], store: str, reason: str) -> None: ...


class BaseRestoreListener:
    """No-op listener to subclass; override only what you need."""

    def on_restore_start(
        self, partition: tuple[str, int], store: str, start_offset: int, end_offset: int
    ) -> None:
        pass

    def on_batch_restored(
        self, partition: tuple[str, int], store: str, batch_end_offset: int, num_restored: int
    ) -> None:
        pass

    def on_restore_end(self, partition: tuple[str, int], store: str, total_restored: int) -> None:
        pass

    def on_restore_reason(self, partition: tuple[str, int], store: str, reason: str) -> None:
        pass


class LoggingRestoreListener(BaseRestoreListener):
    """Logs restore start, end and reasons (always installed)."""

    def on_restore_start(self, partition, store, start_offset, end_offset) -> None:  # type: ignore[no-untyped-def]
        log.info(
            "restoring %s from %s[%d] offsets %d..~%d", store, *partition, start_offset, end_offset
        )

    def on_restore_end(self, partition, store, total_restored) -> None:  # type: ignore[no-untyped-def]
        log.info("restored %s from %s[%d]: %d records", store, *partition, total_restored)

    def on_restore_reason(self, partition, store, reason) -> None:  # type: ignore[no-untyped-def]
        log.warning("store %s (%s[%d]): %s", store, *partition, reason)


class CompositeRestoreListener(BaseRestoreListener):
    """Fans callbacks out to several listeners; thread-safe (partitions restore in parallel)."""

    def __init__(self, listeners: list[StateRestoreListener]) -> None:
        self.listeners = list(listeners)
        self._lock = threading.Lock()

    def _each(self, method: str, *args: object) -> None:
        with self._lock:
            for listener in self.listeners:
                getattr(listener, method)(*args)

    def on_restore_start(self, partition, store, start_offset, end_offset) -> None:  # type: ignore[no-untyped-def]
        self._each("on_restore_start", partition, store, start_offset, end_offset)

    def on_batch_restored(self, partition, store, batch_end_offset, num_restored) -> None:  # type: ignore[no-untyped-def]
        self._each("on_batch_restored", partition, store, batch_end_offset, num_restored)

    def on_restore_end(self, partition, store, total_restored) -> None:  # type: ignore[no-untyped-def]
        self._each("on_restore_end", partition, store, total_restored)

    def on_restore_reason(self, partition, store, reason) -> None:  # type: ignore[no-untyped-def]
        self._each("on_restore_reason", partition, store, reason)
