"""What a generator yields, and where a Java-compatible producer would store it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from statekeeper.kafka.model import KafkaRecord
from statekeeper.kafka.partitioning import Partitioner


@dataclass(frozen=True, slots=True)
class GeneratedRecord:
    """One record to produce. ``malformed`` names the broken rule; ``late`` how late it is
    delivered (labels chosen by the generator; summaries count records per label)."""

    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    malformed: str | None = None
    late: str | None = None


def place_records(
    records: Iterable[GeneratedRecord], topic: str, partitions: int
) -> dict[int, list[KafkaRecord]]:
    """Records as a broker would hold them after :func:`~statekeeper.generate.producer.produce`.

    Same partitioner as the producer (murmur2, round-robin for null keys), offsets from 0 in
    production order. Lets tests and drills run the recomputation without a broker.
    """
    partitioner = Partitioner(partitions)
    placed: dict[int, list[KafkaRecord]] = {p: [] for p in range(partitions)}
    for record in records:
        partition = partitioner(record.key)
        log = placed[partition]
        log.append(
            KafkaRecord(topic, partition, len(log), record.timestamp_ms, record.key, record.value)
        )
    return placed


def check_share(name: str, share: float) -> None:
    """Raise ValueError unless ``0 <= share <= 1``."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"{name} must be between 0 and 1, got {share}")
