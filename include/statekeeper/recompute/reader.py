"""Read a whole topic (every partition, log start to true log end) for recomputation."""

from __future__ import annotations

from typing import Any

from statekeeper.errors import ConfigError
from statekeeper.kafka.model import KafkaRecord, OffsetRange, tp_key


def read_topic(
    bootstrap: str,
    topic: str,
    *,
    timeout_s: float = 60.0,
    consumer_overrides: dict[str, Any] | None = None,
) -> dict[int, list[KafkaRecord]]:
    """``{partition: records in offset order}`` of every partition of ``topic``.

    The end of each partition is found by reading to partition EOF (invariant 5), so it is
    right on brokers whose high watermark is not the log end. Records produced after the
    ends were found are not included. Raises ConfigError if the topic does not exist.
    """
    from statekeeper.kafka.adapter import consumer_config
    from statekeeper.kafka.admin import make_admin, partition_count
    from statekeeper.kafka.offsets import log_end_offsets, log_start_offsets
    from statekeeper.kafka.range_reader import read_ranges

    count = partition_count(make_admin(bootstrap), topic, timeout_s=timeout_s)
    if count is None:
        raise ConfigError(f"topic {topic!r} does not exist on {bootstrap}")
    conf = consumer_config(
        bootstrap, group_id="statekeeper-recompute", **(consumer_overrides or {})
    )
    tps = [(topic, p) for p in range(count)]
    starts = log_start_offsets(conf, tps, timeout_s)
    ends = log_end_offsets(conf, tps, timeout_s)
    ranges = [OffsetRange(topic, p, starts[(topic, p)], ends[(topic, p)]) for p in range(count)]
    records = read_ranges(conf, ranges, timeout_s)
    return {p: records[tp_key(topic, p)] for p in range(count)}
