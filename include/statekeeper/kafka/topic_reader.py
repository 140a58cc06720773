"""Read a whole topic: every partition from its log start to its partition EOF.

For tools and checks that need all of a topic at once (reference recomputations, reading an
app's output). One consumer reads every partition with the shared
:class:`~statekeeper.kafka.partition_reader.PartitionReader` and the read-to-EOF prefetch.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Message

from statekeeper.errors import ConfigError
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.admin import make_admin, partition_count
from statekeeper.kafka.consumed_run import to_records
from statekeeper.kafka.model import KafkaRecord
from statekeeper.kafka.offsets import watermarks
from statekeeper.kafka.partition_reader import PartitionReader, assign_at, eof_consumer


def read_topic(
    bootstrap: str, topic: str, *, timeout_s: float = 60.0, **consumer_overrides: Any
) -> dict[int, list[KafkaRecord]]:
    """``{partition: records in offset order}`` of every partition of ``topic``.

    Each partition is read to its partition EOF (invariant 5), so the result is right on
    brokers whose high watermark is not the log end; records produced after a partition's
    EOF was reached are not included. ``consumer_overrides`` are librdkafka settings (e.g.
    security). Raises ConfigError if the topic does not exist.
    """
    count = partition_count(make_admin(bootstrap), topic, timeout_s=timeout_s)
    if count is None:
        raise ConfigError(f"topic {topic!r} does not exist on {bootstrap}")
    tps = [(topic, p) for p in range(count)]
    consumer = eof_consumer(consumer_config(bootstrap, **consumer_overrides), "topic-reader")
    messages: dict[int, list[Message]] = {p: [] for p in range(count)}
    try:
        starts, highs = watermarks(consumer, tps, timeout_s)
        assign_at(consumer, starts)
        for (_, partition), run, _ in PartitionReader(
            consumer, starts, size_hints=highs, timeout_s=timeout_s
        ):
            messages[partition].extend(run)
    finally:
        consumer.close()
    return {p: to_records(topic, p, msgs) for p, msgs in messages.items()}
