"""Java-compatible key partitioning: which partition a Kafka client puts a keyed record in.

Kafka's Java producer (and Kafka Streams) choose ``toPositive(murmur2(key)) % partitions``;
librdkafka does the same with ``"partitioner": "murmur2_random"``. The generators compute
partitions here so data is placed exactly as a Java producer would place it, and records
with null keys get a deterministic round-robin partition instead of a random one.
"""

from __future__ import annotations

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """32-bit murmur2 of ``data`` as Kafka's ``Utils.murmur2`` computes it (signed int)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    tail = length & ~3
    for i in range(0, tail, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Java's default partitioner picks for a non-null ``key``."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class Partitioner:
    """murmur2 for keyed records, round-robin (deterministic) for null keys."""

    def __init__(self, partitions: int) -> None:
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        self.partitions = partitions
        self._next_null = 0
        self._cache: dict[bytes, int] = {}

    def __call__(self, key: bytes | None) -> int:
        if key is None:
            partition = self._next_null
            self._next_null = (partition + 1) % self.partitions
            return partition
        partition = self._cache.get(key)
        if partition is None:
            partition = partition_for_key(key, self.partitions)
            if len(self._cache) < 100_000:
                self._cache[key] = partition
        return partition
