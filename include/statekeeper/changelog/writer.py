"""Sends changelog records and commit markers, and proves every one was acknowledged."""

from __future__ import annotations

import threading
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from statekeeper.changelog.fencing import (
    Headers,
    begin_record,
    marker_headers,
    marker_key,
    record_headers,
)
from statekeeper.changelog.records import CommitMarker
from statekeeper.errors import ProduceError

#: How long a write waits for room in the client's full local queue before it fails.
QUEUE_FULL_WAIT_S = 60.0


class ChangelogWriter:
    """Two idempotent producers: one for changelog records, one for commit markers.

    ``send`` is fire-and-forget; ``flush`` waits for every delivery and raises
    :class:`ProduceError` if any record failed, so a batch is never marked committed
    while one of its records is missing (invariant 2). Changelog records report only
    failures (a per-record Python callback cost ~1 µs per record, measured); markers report
    every delivery because the store keeps a marker's offset. A marker is produced only
    after its records were flushed, so two producers cannot reorder them.
    """

    def __init__(self, producer_config: dict[str, Any]) -> None:
        self._producer = Producer(
            {
                **producer_config,
                "delivery.report.only.error": True,
                "on_delivery": self._on_delivery,
            }
        )
        self._marker_config = dict(producer_config)
        self._marker_producer: Producer | None = None
        self._lock = threading.Lock()
        self._errors: list[str] = []
        self._marker_offsets: dict[tuple[str, int], int] = {}
        self.records_sent = 0
        self._closed = False

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            with self._lock:
                self._errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    def _on_marker_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._on_delivery(err, msg)
            return
        with self._lock:
            self._marker_offsets[(msg.topic(), msg.partition())] = msg.offset()

    def send(
        self,
        topic: str,
        partition: int,
        key: bytes,
        value: bytes | None,
        headers: Headers | None = None,
    ) -> None:
        """One record; see :meth:`send_all`."""
        self.send_all(topic, partition, [(key, value)], headers)

    def send_all(
        self,
        topic: str,
        partition: int,
        items: list[tuple[bytes, bytes | None]],
        headers: Headers | None = None,
    ) -> None:
        """Produce records to one partition in one tight loop (fire-and-forget: only
        :meth:`flush` proves them delivered); ``headers`` (the writer's epoch stamp,
        :func:`~statekeeper.changelog.fencing.record_headers`) go on every record."""
        produce = self._producer.produce
        try:
            if headers is None:
                for key, value in items:
                    try:
                        produce(topic, value, key, partition)
                    except BufferError:
                        self._wait_for_room(topic, partition, key, value, None)
            else:
                for key, value in items:
                    try:
                        produce(topic, value, key, partition, headers=headers)
                    except BufferError:
                        self._wait_for_room(topic, partition, key, value, headers)
        except KafkaException as exc:
            raise ProduceError(f"cannot produce to {topic}[{partition}]: {exc}") from exc
        self.records_sent += len(items)

    def _wait_for_room(
        self,
        topic: str,
        partition: int,
        key: bytes,
        value: bytes | None,
        headers: Headers | None,
    ) -> None:
        """The client's local queue is full (a large task's writes outrun the broker's acks;
        a new idempotent producer acks nothing for its first ~0.5 s on some brokers): serve
        deliveries until the record fits, for at most ``QUEUE_FULL_WAIT_S``."""
        deadline = time.monotonic() + QUEUE_FULL_WAIT_S
        kwargs = {} if headers is None else {"headers": headers}
        while True:
            self._producer.poll(0.05)
            try:
                self._producer.produce(topic, value, key, partition, **kwargs)
                return
            except BufferError:
                if time.monotonic() > deadline:
                    raise ProduceError(
                        f"the producer queue stayed full for {QUEUE_FULL_WAIT_S:g} s while "
                        f"writing {topic}[{partition}]: the broker is not acknowledging records"
                    ) from None

    def flush(self, timeout_s: float) -> None:
        """Wait for all outstanding deliveries; raise if any failed or timed out."""
        self._flush(self._producer, timeout_s)

    def _flush(self, producer: Producer, timeout_s: float) -> None:
        remaining = producer.flush(timeout_s)
        if remaining:
            # Not sent later behind the caller's back: the batch is not committed.
            producer.purge(in_queue=True, in_flight=False)
            producer.poll(0)
        with self._lock:
            errors, self._errors = self._errors, []
        if remaining:
            errors.append(f"{remaining} record(s) still unacknowledged after {timeout_s:.0f} s")
        if errors:
            raise ProduceError(
                "changelog records were not acknowledged, the batch is not committed: "
                + "; ".join(errors[:5])
                + (f" (+{len(errors) - 5} more)" if len(errors) > 5 else "")
            )

    def write_markers(
        self, markers: list[tuple[str, int, CommitMarker]], timeout_s: float
    ) -> dict[tuple[str, int], int]:
        """Produce one marker per (topic, partition) after every record sent so far is
        acknowledged; return each marker's offset."""
        self.flush(timeout_s)
        if self._marker_producer is None:
            self._marker_producer = Producer(self._marker_config)
        producer = self._marker_producer
        with self._lock:
            self._marker_offsets.clear()
        for topic, partition, marker in markers:
            producer.produce(
                topic,
                marker.encode(),
                marker_key(marker.epoch),
                partition,
                on_delivery=self._on_marker_delivery,
                headers=marker_headers(marker.epoch),
            )
        self._flush(producer, timeout_s)
        with self._lock:
            return dict(self._marker_offsets)

    def write_begins(self, partitions: list[tuple[str, int]], epoch: int, timeout_s: float) -> None:
        """Open ``partitions`` under ``epoch``: one begin record each, acknowledged before this
        returns, so whatever an older epoch writes from now on is fenced (changelog.fencing)."""
        for topic, partition in partitions:
            key, value, headers = begin_record(epoch)
            self._producer.produce(topic, value, key, partition, headers=headers)
        self.flush(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is queued (best effort), then close both producers (idempotent).

        Closing matters: each producer's delivery callback refers back to this writer, so an
        unclosed one lives until a garbage collection and keeps reconnecting to a broker
        that is gone.
        """
        if self._closed:
            return
        self._closed = True
        for producer in (self._producer, self._marker_producer):
            if producer is not None:
                producer.flush(timeout_s)
                producer.purge()  # what is left now is dropped: close() would wait for it
                producer.poll(0)
                producer.close()


class PartitionSink:
    """A store's changelog sink: its records go to one partition of one changelog topic,
    stamped with the task's epoch."""

    __slots__ = ("writer", "topic", "partition", "headers")

    def __init__(self, writer: ChangelogWriter, topic: str, partition: int, epoch: int = 0) -> None:
        self.writer, self.topic, self.partition = writer, topic, partition
        self.headers = record_headers(epoch)

    def __call__(self, key: bytes, value: bytes | None) -> None:
        self.send_all([(key, value)])

    def send_all(self, items: list[tuple[bytes, bytes | None]]) -> None:
        if self.headers is None:
            self.writer.send_all(self.topic, self.partition, items)
        else:
            self.writer.send_all(self.topic, self.partition, items, self.headers)
