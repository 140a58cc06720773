"""Produce generated records to Kafka: explicit topic creation, Java-compatible partitions.

Partitions are chosen here (murmur2 of the key like Java clients; round-robin for null
keys, so a run is reproducible), and the producer is also configured with librdkafka's
``murmur2_random`` partitioner so the two never disagree in intent.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from statekeeper.errors import BrokerUnavailableError, ConfigError, ProduceError
from statekeeper.generate.records import GeneratedRecord
from statekeeper.kafka.partitioning import Partitioner

_PROGRESS_EVERY = 2_000
_POLL_EVERY = 1_000


@dataclass
class GenerateSummary:
    """What one generator run produced."""

    topic: str
    partitions: int
    topic_created: bool = False
    records: int = 0
    records_per_partition: dict[int, int] = field(default_factory=dict)
    malformed_by_kind: dict[str, int] = field(default_factory=dict)
    late_by_kind: dict[str, int] = field(default_factory=dict)
    first_timestamp_ms: int | None = None
    last_timestamp_ms: int | None = None
    seconds: float = 0.0

    @property
    def records_per_topic(self) -> dict[str, int]:
        return {self.topic: self.records}

    @property
    def malformed(self) -> int:
        return sum(self.malformed_by_kind.values())

    @property
    def late(self) -> int:
        return sum(self.late_by_kind.values())

    @property
    def span_ms(self) -> int:
        """Time between the smallest and largest record timestamp."""
        if self.first_timestamp_ms is None or self.last_timestamp_ms is None:
            return 0
        return self.last_timestamp_ms - self.first_timestamp_ms

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def add(self, partition: int, record: GeneratedRecord) -> None:
        """Count one record that was sent to ``partition``."""
        self.records += 1
        self.records_per_partition[partition] = self.records_per_partition.get(partition, 0) + 1
        if record.malformed is not None:
            kinds = self.malformed_by_kind
            kinds[record.malformed] = kinds.get(record.malformed, 0) + 1
        if record.late is not None:
            self.late_by_kind[record.late] = self.late_by_kind.get(record.late, 0) + 1
        ts = record.timestamp_ms
        if self.first_timestamp_ms is None or ts < self.first_timestamp_ms:
            self.first_timestamp_ms = ts
        if self.last_timestamp_ms is None or ts > self.last_timestamp_ms:
            self.last_timestamp_ms = ts

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for ``--json`` output."""
        return {
            "topic": self.topic,
            "partitions": self.partitions,
            "topic_created": self.topic_created,
            "records": self.records,
            "records_per_topic": self.records_per_topic,
            "records_per_partition": {
                str(p): n for p, n in sorted(self.records_per_partition.items())
            },
            "malformed": self.malformed,
            "malformed_by_kind": dict(sorted(self.malformed_by_kind.items())),
            "late": self.late,
            "late_by_kind": dict(sorted(self.late_by_kind.items())),
            "first_timestamp_ms": self.first_timestamp_ms,
            "last_timestamp_ms": self.last_timestamp_ms,
            "span_ms": self.span_ms,
            "seconds": round(self.seconds, 3),
            "records_per_s": round(self.records_per_s),
        }

    def describe(self) -> str:
        """A few lines for people."""
        spread = ", ".join(f"p{p}={n}" for p, n in sorted(self.records_per_partition.items()))
        return (
            f"produced {self.records} records to {self.topic!r} ({self.partitions} partitions"
            f"{', created' if self.topic_created else ''}; {spread}) in {self.seconds:.1f}s "
            f"({self.records_per_s:,.0f} rec/s)\n"
            f"malformed: {self.malformed} {dict(sorted(self.malformed_by_kind.items()))}\n"
            f"late: {self.late} {dict(sorted(self.late_by_kind.items()))}\n"
            f"event time: {self.first_timestamp_ms} .. {self.last_timestamp_ms} "
            f"(span {self.span_ms / 1000:.1f}s)"
        )


def summarize(records: Iterable[GeneratedRecord], topic: str, partitions: int) -> GenerateSummary:
    """The summary :func:`produce` would return, without a broker (counts only)."""
    summary = GenerateSummary(topic, partitions)
    partitioner = Partitioner(partitions)
    for record in records:
        summary.add(partitioner(record.key), record)
    return summary


def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[GeneratedRecord],
    *,
    partitions: int = 4,
    total: int | None = None,
    progress: bool = False,
    topic_configs: dict[str, Any] | None = None,
    timeout_s: float = 60.0,
    producer_overrides: dict[str, Any] | None = None,
) -> GenerateSummary:
    """Create ``topic`` if needed, produce ``records`` in order, wait for every ack.

    An existing topic must have ``partitions`` partitions (records are placed by a
    partitioner that depends on the count). ``total`` sizes the progress bar. Raises
    :class:`~statekeeper.errors.ProduceError` if any record is not acknowledged.
    """
    from confluent_kafka import KafkaException, Producer

    from statekeeper.kafka.adapter import producer_config
    from statekeeper.kafka.admin import ensure_topic, make_admin

    admin = make_admin(bootstrap, logger=_client_logger())
    try:
        admin.list_topics(timeout=timeout_s)  # fail fast and clearly when unreachable
        report = ensure_topic(
            admin, topic, partitions, topic_configs, timeout_s=timeout_s, raise_on_mismatch=False
        )
    except KafkaException as exc:
        raise BrokerUnavailableError(
            f"cannot reach the broker at {bootstrap} within {timeout_s:g}s ({exc or 'timeout'}); "
            "start one (`statekeeper broker start`) or pass --bootstrap"
        ) from exc
    if report.partitions != partitions:
        raise ConfigError(
            f"topic {topic!r} exists with {report.partitions} partitions, not {partitions}: "
            f"pass --partitions {report.partitions} or delete the topic"
        )
    summary = GenerateSummary(topic, partitions, topic_created=report.created)
    failures: Counter[str] = Counter()
    first_failure: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures[err.name()] += 1
            if not first_failure:
                first_failure.append(str(err))

    config = producer_config(
        bootstrap,
        partitioner="murmur2_random",
        logger=_client_logger(),
        **(producer_overrides or {}),
    )
    producer = Producer(config)
    partitioner = Partitioner(partitions)
    bar = _ProgressBar(topic, total) if progress else None
    started = time.perf_counter()
    try:
        for n, record in enumerate(records, 1):
            partition = partitioner(record.key)
            while True:
                try:
                    producer.produce(
                        topic,
                        value=record.value,
                        key=record.key,
                        partition=partition,
                        timestamp=record.timestamp_ms,
                        on_delivery=on_delivery,
                    )
                    break
                except BufferError:
                    producer.poll(0.05)  # local queue full: let deliveries drain
            summary.add(partition, record)
            if n % _POLL_EVERY == 0:
                producer.poll(0)
            if bar is not None and n % _PROGRESS_EVERY == 0:
                bar.update(n)
        remaining = producer.flush(timeout_s)
    except KafkaException as exc:
        raise ProduceError(f"producing to {topic!r} failed: {exc}") from exc
    finally:
        if bar is not None:
            bar.close(summary.records)
    summary.seconds = time.perf_counter() - started
    if remaining or failures:
        raise ProduceError(
            f"{sum(failures.values()) + remaining} of {summary.records} records to {topic!r} "
            f"were not acknowledged ({dict(failures)}, {remaining} still queued after "
            f"{timeout_s:g}s; first error: {first_failure[0] if first_failure else 'timeout'})"
        )
    return summary


def _client_logger() -> logging.Logger:
    """librdkafka's log lines go to Python logging (silent unless configured) instead of
    stderr: failures surface as one clear error from the calls and delivery reports."""
    return logging.getLogger("statekeeper.generate.kafka")


class _ProgressBar:
    """A rich progress bar on stderr (records sent against the expected total)."""

    def __init__(self, topic: str, total: int | None) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("[bold]generate[/] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
        )
        self._task = self._progress.add_task(topic, total=total)
        self._progress.start()

    def update(self, sent: int) -> None:
        self._progress.update(self._task, completed=sent)

    def close(self, sent: int) -> None:
        self._progress.update(self._task, completed=sent, total=sent)
        self._progress.stop()
