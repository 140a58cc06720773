"""The one place that knows how brokers differ, plus the base client configs.

statekeeper must be correct on Apache Kafka (production, docker-compose.yml) and on the
embedded Tansu broker (tests, demo). Code elsewhere asks a :class:`BrokerProfile` what the
broker can do ("does it compact?", "are transactions safe?") and never checks the broker's
name itself. Behaviour common to both (read to the end with partition EOF, create topics
explicitly) is simply what every caller does, so it needs no flag here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from statekeeper.errors import BrokerUnavailableError, ConfigError

Flavor = Literal["auto", "kafka", "tansu"]

#: Cluster id Tansu reports unless started with ``--cluster-id``.
TANSU_DEFAULT_CLUSTER_ID = "tansu_cluster"


@dataclass(frozen=True)
class BrokerProfile:
    """What a broker can be relied on for; code branches on these fields, never on ``name``.

    Attributes:
        name: ``"kafka"`` or ``"tansu"``, for logs and status output only.
        transactions_reliable: read_committed hides aborted records and producer fencing
            works, so output may use transactions for exactly-once (correctness never
            depends on them; commit markers do).
        compacts: log compaction and retention run, so changelogs stay bounded; when False
            they grow forever and snapshots are the only bound on restore time.
        reports_config_defaults: describe_configs lists every config including broker
            defaults; when False an absent key means "broker default, unknown".
        validates_topic_configs: the broker rejects invalid topic configs at creation.
        latest_offset_reliable: ListOffsets(latest) / watermarks equal the log end offset.
            Reads to the end use partition EOF either way (invariant 5).
        supports_delete_records: DeleteRecords works (it crashes Tansu's handler).
        supports_create_partitions: CreatePartitions works.
        cluster_id: the id the cluster reported, when detected.
    """

    name: str
    transactions_reliable: bool
    compacts: bool
    reports_config_defaults: bool
    validates_topic_configs: bool
    latest_offset_reliable: bool
    supports_delete_records: bool
    supports_create_partitions: bool
    cluster_id: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON status output."""
        return dataclasses.asdict(self)


KAFKA = BrokerProfile(
    name="kafka",
    transactions_reliable=True,
    compacts=True,
    reports_config_defaults=True,
    validates_topic_configs=True,
    latest_offset_reliable=True,
    supports_delete_records=True,
    supports_create_partitions=True,
)

# Measured against Tansu 0.6.0 (see ENVIRONMENT.md, "Does NOT behave like Kafka").
TANSU = BrokerProfile(
    name="tansu",
    transactions_reliable=False,
    compacts=False,
    reports_config_defaults=False,
    validates_topic_configs=False,
    latest_offset_reliable=False,
    supports_delete_records=False,
    supports_create_partitions=False,
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
    librdkafka's defaults measured on loopback); pair it with
    ``consume(num_messages=1000..30000, timeout=0.05)``. Offsets are managed by statekeeper,
    never auto-committed. ``group.id`` is only required by the client; ``assign()`` does
    not join the group.
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
