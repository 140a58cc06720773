"""The one place that knows how brokers differ, plus the base client configs.

statekeeper must be correct on Apache Kafka (production, docker-compose.yml) and on the
embedded Tansu broker (tests, demo). Code that must behave differently asks the
:class:`BrokerProfile` (never the broker's name); everywhere else the same code is correct on
both, and this table is where a reader finds why.

How Tansu 0.6.0 differs from Kafka, and where that is handled (docs/brokers.md explains each):

- Transactions cannot be relied on (read_committed consumers still see aborted records,
  producer fencing is broken): :attr:`BrokerProfile.transactions_reliable`. Correctness
  never depends on them (commit markers do, invariant 2); the app says at start what
  ``exactly_once`` means on the broker it found.
- ``ListOffsets(latest)``, the high watermark, trails the log end (start of the last produce
  batch + 1). No flag: every read to the end reads to partition EOF
  (:mod:`statekeeper.kafka.partition_reader`, invariant 5), which is correct on Kafka too;
  log-end lookups (:mod:`statekeeper.kafka.offsets`) start at ``high - 1``, so on Kafka they
  read at most one produce batch per partition. Watermarks only size reads.
- A fetch from beyond the log end gets no answer at all (Kafka answers
  OFFSET_OUT_OF_RANGE), so such a read stalls until its timeout instead of failing at once.
  No flag: both end in an error; the restorer checks a checkpoint against the watermarks
  before reading, and a stalled range read probes log start and end to say why.
- No log compaction and no retention: changelogs grow, restores replay all of them.
  :attr:`BrokerProfile.compacts` says whether cleaner tuning means anything (the changelog
  audit tunes it only there). Nothing relies on compaction, and the restorer accepts a
  checkpointed marker that compaction removed (a later marker follows), so both are
  restored the same way (tests/unit/state/test_compaction_safety.py).
- describe_configs returns only the keys set at creation: :mod:`statekeeper.kafka.admin`
  reports a requested config the broker does not list as "broker default, unknown", never
  as a mismatch; on Kafka every config is listed, so nothing is unknown. No flag.
- Producing to a missing topic auto-creates it, and configs are not validated: topics are
  created explicitly and looked up with DescribeTopics, never a Metadata request that
  could create them (:mod:`statekeeper.kafka.admin`). No flag.
- Legacy AlterConfigs and CreatePartitions are unsupported: statekeeper calls neither. No
  flag. DeleteRecords makes Tansu's broker thread panic:
  :attr:`BrokerProfile.delete_records` is false, and the changelog audit's ``--trim``
  refuses without calling it.
- A new consumer group's first assignment is slow, static members never expire: every
  reader assigns partitions itself and joins no group. No flag.
- Not handled yet: with S3 storage (a durable embedded broker) a fetch returns only what
  storage delivered within ``fetch.wait.max.ms``. The readers' 10 ms wait (what makes EOF
  prompt, see :func:`~statekeeper.kafka.partition_reader.eof_consumer`) was measured to
  starve a read for 3-30 s after a restart of such a broker; 50 ms and more did not.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from statekeeper.errors import BrokerUnavailableError, ConfigError

Flavor = Literal["auto", "kafka", "tansu"]


@dataclass(frozen=True)
class BrokerProfile:
    """What a broker can be relied on for where behaviour differs (see the module table);
    code branches on these fields, never on ``name``.

    Attributes:
        name: ``"kafka"`` or ``"tansu"``, for logs and status output only.
        transactions_reliable: read_committed hides aborted records and producer fencing
            works, so output could use transactions for exactly-once (correctness never
            depends on them; commit markers do).
        compacts: the broker runs a log cleaner on ``cleanup.policy=compact`` topics, so
            cleaner configs (``min.cleanable.dirty.ratio``, ``segment.ms``,
            ``min.compaction.lag.ms``) take effect.
        delete_records: the DeleteRecords API works (trimming a changelog below a
            snapshot's marker); never call it where this is false.
        cluster_id: the id the cluster reported, when detected.
    """

    name: str
    transactions_reliable: bool
    compacts: bool = True
    delete_records: bool = True
    cluster_id: str | None = None


KAFKA = BrokerProfile(name="kafka", transactions_reliable=True, compacts=True, delete_records=True)

# Measured against Tansu 0.6.0 (see docs/brokers.md, "The differences").
TANSU = BrokerProfile(
    name="tansu", transactions_reliable=False, compacts=False, delete_records=False
)

_PROFILES: dict[str, BrokerProfile] = {"kafka": KAFKA, "tansu": TANSU}


def profile_for(flavor: str) -> BrokerProfile:
    """The fixed profile for ``"kafka"`` or ``"tansu"`` (no broker contact)."""
    try:
        return _PROFILES[flavor]
    except KeyError:
        raise ConfigError(
            f"unknown broker flavor {flavor!r}: use one of auto, kafka, tansu"
        ) from None


def detect_profile(
    admin_or_bootstrap: Any, flavor: Flavor | str = "auto", timeout_s: float = 10.0
) -> BrokerProfile:
    """Return the broker's profile; with ``flavor="auto"`` ask the broker who it is.

    ``admin_or_bootstrap`` is a confluent_kafka ``AdminClient`` or a bootstrap string. Tansu
    is recognised by its cluster id (``tansu_cluster`` by default) or, if started with
    another id, by answering DescribeConfigs for a broker with no entries (Apache Kafka
    always lists hundreds). Anything else gets Kafka semantics.
    """
    if flavor != "auto":
        return profile_for(flavor)

    from confluent_kafka import KafkaException

    admin = _as_admin(admin_or_bootstrap)
    try:
        metadata = admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise BrokerUnavailableError(
            f"cannot detect the broker flavor: metadata request failed within {timeout_s:g}s "
            f"({exc}); check the bootstrap servers or pass flavor='kafka'|'tansu'"
        ) from exc
    cluster_id = metadata.cluster_id
    base = TANSU if _looks_like_tansu(admin, metadata, timeout_s) else KAFKA
    return dataclasses.replace(base, cluster_id=cluster_id)


def _looks_like_tansu(admin: Any, metadata: Any, timeout_s: float) -> bool:
    if (metadata.cluster_id or "").startswith("tansu"):
        return True
    if not metadata.brokers:
        return False
    from confluent_kafka.admin import ConfigResource, ResourceType

    broker_id = str(next(iter(metadata.brokers)))
    try:
        futures = admin.describe_configs(
            [ConfigResource(ResourceType.BROKER, broker_id)], request_timeout=timeout_s
        )
        configs = next(iter(futures.values())).result(timeout=timeout_s)
    except Exception:  # e.g. no DescribeConfigs ACL on a secured cluster: assume Kafka
        return False
    return len(configs) == 0


def _as_admin(admin_or_bootstrap: Any) -> Any:
    if isinstance(admin_or_bootstrap, str):
        from confluent_kafka.admin import AdminClient

        return AdminClient(kafka_client_config(admin_or_bootstrap))
    return admin_or_bootstrap


# --- client configs --------------------------------------------------------------------
# Keys are librdkafka's dotted names, so pass overrides as ``**{"linger.ms": 20}``; Python
# callback keys (``error_cb``, ``on_delivery``, ``logger``) work as plain keywords. An
# override of ``None`` removes the key.

_MB = 1024 * 1024
#: The consumer prefetch of :func:`consumer_config`, for reading whole partitions.
READ_TO_EOF_PREFETCH: dict[str, int] = {
    "queued.min.messages": 1_000_000,
    "fetch.max.bytes": 50 * _MB,
    "max.partition.fetch.bytes": 50 * _MB,
}


def kafka_client_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """Settings shared by every client (admin, producer, consumer)."""
    # log_level 4: keep warnings and errors, drop the info-level "Disconnected" chatter that
    # every client prints when a broker closes idle connections.
    base = {"bootstrap.servers": bootstrap, "client.id": "statekeeper", "log_level": 4}
    return _merge(base, overrides)


def consumer_config(
    bootstrap: str, group_id: str = "statekeeper-reader", **overrides: Any
) -> dict[str, Any]:
    """Consumer tuned to read whole partitions to EOF fast (restores, audits, drills).

    A large prefetch is what makes restore run at the broker's physical limit (~4-7x
    librdkafka's defaults measured on loopback), paired with
    ``consume(num_messages=1000..30000, timeout=0.05)`` as
    :class:`~statekeeper.kafka.partition_reader.PartitionReader` does. Offsets are managed by
    statekeeper, never auto-committed. ``group.id`` is only required by the client;
    ``assign()`` does not join the group.
    """
    base = {
        "group.id": group_id,
        "enable.partition.eof": True,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **READ_TO_EOF_PREFETCH,
    }
    return _merge(kafka_client_config(bootstrap), {**base, **overrides})


def producer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    """Producer for changelog and output records: durable, ordered, batched.

    Idempotence keeps per-partition order across retries, which changelog replay relies on.
    """
    base = {
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "batch.size": _MB,
        "compression.type": "lz4",
    }
    return _merge(kafka_client_config(bootstrap), {**base, **overrides})


def _merge(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged
