"""The task's :class:`OutputProducer`: output, repartition and DLQ records to Kafka.

Keyed records are partitioned like Java clients (murmur2 of the key bytes, librdkafka's
``murmur2_random``), so repartition and output topics are co-partitioned exactly as Kafka
Streams would do it (:mod:`statekeeper.kafka.partitioning` computes the same partition in
Python). Delivery failures are collected and raised by :meth:`OutputProducer.flush`.
No pyspark import: executors and plain processes use it alike.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from statekeeper.errors import ProduceError
from statekeeper.kafka.adapter import producer_config

_QUEUE_FULL_WAIT_S = 60.0
_POLL_EVERY = 10_000  # serve delivery callbacks every N sends
_MAX_REPORTED = 5


class OutputProducer:
    """Produces records and reports every failure at :meth:`flush`.

    ``overrides`` are librdkafka settings on top of
    :func:`statekeeper.kafka.adapter.producer_config` (durable, idempotent, batched) and the
    Java-compatible partitioner.
    """

    def __init__(self, bootstrap: str, **overrides: Any) -> None:
        config = producer_config(
            bootstrap,
            **{
                "partitioner": "murmur2_random",
                # Only failures call back: success needs no Python work per record.
                "delivery.report.only.error": True,
                "on_delivery": self._on_delivery,
                **overrides,
            },
        )
        self._producer = Producer(config)
        self._failures: list[str] = []
        self._failed = 0
        self._since_poll = 0
        self.sent = 0
        self._closed = False

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes]] | None = None,
        timestamp_ms: int | None = None,
        partition: int | None = None,
    ) -> None:
        """Queue one record; ``value=None`` is a tombstone, ``partition=None`` partitions by
        key (murmur2, like Java)."""
        kwargs: dict[str, Any] = {}
        if headers:
            kwargs["headers"] = headers
        if timestamp_ms is not None:
            kwargs["timestamp"] = timestamp_ms
        if partition is not None:
            kwargs["partition"] = partition
        try:
            self._producer.produce(topic, value, key, **kwargs)
        except BufferError:
            self._wait_for_room(topic, value, key, kwargs)
        except KafkaException as exc:
            where = topic if partition is None else f"{topic}[{partition}]"
            raise ProduceError(f"cannot produce to {where}: {exc.args[0].str()}") from exc
        self.sent += 1
        self._since_poll += 1
        if self._since_poll >= _POLL_EVERY:
            self._since_poll = 0
            self._producer.poll(0)

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued record is acknowledged; raise :class:`ProduceError` if any
        record failed or is still unacknowledged after ``timeout_s``."""
        remaining = self._producer.flush(timeout_s)
        if remaining:
            # Don't let them trickle out after we reported failure: the batch is retried.
            self._producer.purge(in_queue=True, in_flight=False)
            self._producer.poll(0)
        failed, failures = self._failed, self._failures
        self._failed, self._failures = 0, []
        if remaining or failed:
            parts = []
            if remaining:
                parts.append(f"{remaining} record(s) not acknowledged within {timeout_s:g} s")
            if failed:
                parts.append(f"{failed} record(s) failed: " + "; ".join(failures))
            raise ProduceError(
                "producing output failed: " + ", ".join(parts) + " (broker reachable? topic "
                "exists?); the batch is not committed and will be retried"
            )

    def close(self, timeout_s: float = 10.0) -> None:
        """Deliver what is still queued (best effort; call :meth:`flush` to see errors), then
        close the producer (idempotent): its delivery callback refers back to this object, so
        an unclosed producer lives until a garbage collection, reconnecting meanwhile."""
        if self._closed:
            return
        self._closed = True
        self._producer.flush(timeout_s)
        self._producer.purge()  # what is left now is dropped: close() would wait for it
        self._producer.poll(0)
        self._producer.close()

    def __len__(self) -> int:
        """Records queued and not yet acknowledged."""
        return len(self._producer)

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is None:
            return
        self._failed += 1
        if len(self._failures) < _MAX_REPORTED:
            self._failures.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    def _wait_for_room(
        self, topic: str, value: bytes | None, key: bytes | None, kwargs: dict[str, Any]
    ) -> None:
        deadline = time.monotonic() + _QUEUE_FULL_WAIT_S
        while True:
            self._producer.poll(0.05)
            try:
                self._producer.produce(topic, value, key, **kwargs)
                return
            except BufferError:
                if time.monotonic() > deadline:
                    raise ProduceError(
                        f"the producer queue stayed full for {_QUEUE_FULL_WAIT_S:g} s while "
                        f"producing to {topic!r}: the broker is not acknowledging records"
                    ) from None
