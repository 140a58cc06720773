"""Standby update listeners, mirroring Kafka Streams' ``StandbyUpdateListener`` (KIP-988).

Standbys run in an executor's services host, far from the driver where an app registers its
listeners, so the host records events as plain dicts (:class:`RecordingStandbyListener`,
part of the executor report) and the driver replays them (:func:`replay_event`), in order
and once each: every event carries the recorder's ``stream`` id and a growing ``seq``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from enum import StrEnum
from typing import Any, Protocol

log = logging.getLogger("statekeeper.standby")

TopicPartition = tuple[str, int]


class SuspendReason(StrEnum):
    """Why a standby stopped updating a store."""

    #: The task became active on this executor: the active task takes the copy over.
    PROMOTED = "promoted"
    #: The standby was assigned to another executor (or the task no longer has one here).
    MIGRATED = "migrated"
    #: The executor's services stopped (the app or the worker process ended).
    CLOSED = "closed"


class StandbyUpdateListener(Protocol):
    """Told when a standby starts updating a store, loads a batch, and stops.

    ``current_end_offset`` is the changelog's end as last seen (the broker's high watermark
    or the end of the read, whichever is further); offsets of applied batches are those of
    the commit markers that close them (records past the last marker are never applied)."""

    def on_update_start(
        self, topic_partition: TopicPartition, store_name: str, starting_offset: int
    ) -> None: ...

    def on_batch_loaded(
        self,
        topic_partition: TopicPartition,
        store_name: str,
        batch_end_offset: int,
        batch_size: int,
        current_end_offset: int,
    ) -> None: ...

    def on_update_suspended(
        self,
        topic_partition: TopicPartition,
        store_name: str,
        store_offset: int,
        current_end_offset: int,
        reason: SuspendReason,
    ) -> None: ...


class BaseStandbyUpdateListener:
    """No-op listener to subclass; override only what you need."""

    def on_update_start(
        self, topic_partition: TopicPartition, store_name: str, starting_offset: int
    ) -> None:
        pass

    def on_batch_loaded(
        self,
        topic_partition: TopicPartition,
        store_name: str,
        batch_end_offset: int,
        batch_size: int,
        current_end_offset: int,
    ) -> None:
        pass

    def on_update_suspended(
        self,
        topic_partition: TopicPartition,
        store_name: str,
        store_offset: int,
        current_end_offset: int,
        reason: SuspendReason,
    ) -> None:
        pass


class CompositeStandbyUpdateListener(BaseStandbyUpdateListener):
    """Fans events out to several listeners; one listener's failure is logged, not raised
    (a listener must never stop a standby)."""

    def __init__(self, listeners: list[StandbyUpdateListener]) -> None:
        self.listeners = list(listeners)

    def _each(self, method: str, *args: Any) -> None:
        for listener in self.listeners:
            try:
                getattr(listener, method)(*args)
            except Exception:
                log.exception("standby listener %r failed in %s", listener, method)

    def on_update_start(self, topic_partition, store_name, starting_offset) -> None:  # type: ignore[no-untyped-def]
        self._each("on_update_start", topic_partition, store_name, starting_offset)

    def on_batch_loaded(  # type: ignore[no-untyped-def]
        self, topic_partition, store_name, batch_end_offset, batch_size, current_end_offset
    ) -> None:
        self._each(
            "on_batch_loaded",
            topic_partition,
            store_name,
            batch_end_offset,
            batch_size,
            current_end_offset,
        )

    def on_update_suspended(  # type: ignore[no-untyped-def]
        self, topic_partition, store_name, store_offset, current_end_offset, reason
    ) -> None:
        self._each(
            "on_update_suspended",
            topic_partition,
            store_name,
            store_offset,
            current_end_offset,
            reason,
        )


#: Events a recorder keeps (the oldest are dropped first; ``dropped`` counts them).
DEFAULT_MAX_EVENTS = 500


class RecordingStandbyListener(BaseStandbyUpdateListener):
    """Records every event as a JSON-ready dict, at most ``max_events`` of them.

    Event dicts: ``{"event": "update_start" | "batch_loaded" | "update_suspended",
    "topic", "partition", "store", "time" (epoch s), "stream", "seq"}`` plus the callback's
    own arguments (``starting_offset``; ``batch_end_offset``, ``batch_size``,
    ``current_end_offset``; ``store_offset``, ``current_end_offset``, ``reason``). ``seq``
    grows by one per event of a ``stream`` (one recorder), so a reader that sees the same
    events in several reports replays each once.
    """

    def __init__(self, max_events: int = DEFAULT_MAX_EVENTS) -> None:
        self.stream = uuid.uuid4().hex[:12]
        self.dropped = 0
        self._events: deque[dict[str, Any]] = deque()
        self._max = max_events
        self._seq = 0
        self._lock = threading.Lock()

    def _record(self, event: str, tp: TopicPartition, store: str, **fields: Any) -> None:
        with self._lock:
            entry = {
                "event": event,
                "topic": tp[0],
                "partition": tp[1],
                "store": store,
                "time": time.time(),
                "stream": self.stream,
                "seq": self._seq,
                **fields,
            }
            self._seq += 1
            self._events.append(entry)
            if len(self._events) > self._max:
                self._drop_one()
                self.dropped += 1

    def _drop_one(self) -> None:
        """Drop the oldest batch load (a catch-up records hundreds a second), else the oldest
        event: starts and suspensions are rare and must reach the driver."""
        for i, event in enumerate(self._events):
            if event["event"] == "batch_loaded":
                del self._events[i]
                return
        self._events.popleft()

    def on_update_start(self, topic_partition, store_name, starting_offset) -> None:  # type: ignore[no-untyped-def]
        self._record("update_start", topic_partition, store_name, starting_offset=starting_offset)

    def on_batch_loaded(  # type: ignore[no-untyped-def]
        self, topic_partition, store_name, batch_end_offset, batch_size, current_end_offset
    ) -> None:
        self._record(
            "batch_loaded",
            topic_partition,
            store_name,
            batch_end_offset=batch_end_offset,
            batch_size=batch_size,
            current_end_offset=current_end_offset,
        )

    def on_update_suspended(  # type: ignore[no-untyped-def]
        self, topic_partition, store_name, store_offset, current_end_offset, reason
    ) -> None:
        self._record(
            "update_suspended",
            topic_partition,
            store_name,
            store_offset=store_offset,
            current_end_offset=current_end_offset,
            reason=SuspendReason(reason).value,
        )

    def events(self, after_seq: int = -1) -> list[dict[str, Any]]:
        """The kept events with ``seq > after_seq``, oldest first (nothing is removed)."""
        with self._lock:
            return [dict(e) for e in self._events if e["seq"] > after_seq]

    def drain_events(self) -> list[dict[str, Any]]:
        """The kept events, oldest first, removed from the recorder."""
        with self._lock:
            events = list(self._events)
            self._events.clear()
            return events


def replay_event(event: dict[str, Any], listener: StandbyUpdateListener) -> None:
    """Call ``listener`` for one event dict a :class:`RecordingStandbyListener` recorded
    (the driver replays executors' events to the listeners registered on the app)."""
    tp = (str(event["topic"]), int(event["partition"]))
    store = str(event["store"])
    kind = event["event"]
    if kind == "update_start":
        listener.on_update_start(tp, store, int(event["starting_offset"]))
    elif kind == "batch_loaded":
        listener.on_batch_loaded(
            tp,
            store,
            int(event["batch_end_offset"]),
            int(event["batch_size"]),
            int(event["current_end_offset"]),
        )
    elif kind == "update_suspended":
        listener.on_update_suspended(
            tp,
            store,
            int(event["store_offset"]),
            int(event["current_end_offset"]),
            SuspendReason(event["reason"]),
        )
    else:
        raise ValueError(f"unknown standby event {kind!r} in {event}")
