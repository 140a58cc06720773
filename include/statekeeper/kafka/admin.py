"""Topic and broker admin helpers that behave the same on Apache Kafka and Tansu.

Two rules keep them portable (the broker table in :mod:`statekeeper.kafka.adapter` says why):
- topics are created explicitly, and a missing topic is looked up with DescribeTopics,
  never ``list_topics(topic=...)``: that Metadata request auto-creates the topic on Tansu
  (and on Kafka with ``auto.create.topics.enable``);
- a config absent from describe_configs is "broker default, unknown", not a mismatch
  (Tansu only returns the keys set at creation).
"""

from __future__ import annotations

import concurrent.futures
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AdminClient, ClusterMetadata, ConfigResource, NewTopic

from statekeeper.errors import BrokerUnavailableError, ChangelogTopicError, ConfigError
from statekeeper.kafka.adapter import kafka_client_config

# Errors that mean "the broker did not answer" rather than "the broker said no".
_UNREACHABLE = {KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN}


def make_admin(bootstrap: str, **overrides: Any) -> AdminClient:
    """An AdminClient with statekeeper's base client config."""
    return AdminClient(kafka_client_config(bootstrap, **overrides))


@dataclass
class TopicReport:
    """Outcome of :func:`ensure_topic`: created, or found and compared with what was asked."""

    name: str
    created: bool
    expected_partitions: int
    partitions: int | None
    mismatches: list[str] = field(default_factory=list)
    #: Requested configs the broker did not report (broker default, value unknown).
    unknown_configs: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def describe(self) -> str:
        """One line for logs and error messages."""
        if self.created:
            return f"topic {self.name!r} created with {self.expected_partitions} partitions"
        if self.ok:
            text = f"topic {self.name!r} exists and matches ({self.partitions} partitions)"
        else:
            text = f"topic {self.name!r} exists but differs: " + "; ".join(self.mismatches)
        if self.unknown_configs:
            text += f" (not reported by the broker: {', '.join(self.unknown_configs)})"
        return text


def ensure_topic(
    admin: AdminClient,
    name: str,
    partitions: int,
    configs: Mapping[str, Any] | None = None,
    *,
    replication_factor: int | None = None,
    timeout_s: float = 30.0,
    raise_on_mismatch: bool = True,
) -> TopicReport:
    """Create ``name`` with ``partitions`` and ``configs``, or check the existing topic.

    An existing topic is compared on partition count and on each requested config the
    broker reports. With ``raise_on_mismatch`` (default) a difference raises
    :class:`ChangelogTopicError` carrying the report as ``.report``; otherwise the report is
    returned for the caller (e.g. an audit) to show.
    """
    wanted = {key: _config_text(value) for key, value in (configs or {}).items()}
    new_topic = NewTopic(
        name,
        num_partitions=partitions,
        # -1 = the broker's default.replication.factor
        replication_factor=-1 if replication_factor is None else replication_factor,
        config=wanted,
    )
    future = admin.create_topics([new_topic], request_timeout=timeout_s)[name]
    try:
        future.result(timeout=timeout_s)
        return TopicReport(name, True, partitions, partitions)
    except concurrent.futures.TimeoutError as exc:
        raise BrokerUnavailableError(
            f"cannot create topic {name!r}: no answer from the broker within {timeout_s:g}s"
        ) from exc
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() in _UNREACHABLE:
            raise BrokerUnavailableError(
                f"cannot create topic {name!r}: broker did not answer ({error.str()})"
            ) from exc
        if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise ChangelogTopicError(
                f"cannot create topic {name!r} ({partitions} partitions, configs {wanted}): "
                f"{error.str()}"
            ) from exc

    report = _compare(admin, name, partitions, wanted, timeout_s)
    if raise_on_mismatch and not report.ok:
        err = ChangelogTopicError(
            report.describe() + ". Fix the topic (or delete and recreate it) or change the "
            "store's settings to match."
        )
        err.report = report  # type: ignore[attr-defined]
        raise err
    return report


def _compare(
    admin: AdminClient, name: str, partitions: int, wanted: dict[str, str], timeout_s: float
) -> TopicReport:
    actual_partitions = partition_count(admin, name, timeout_s=timeout_s)
    if actual_partitions is None:
        raise ChangelogTopicError(
            f"topic {name!r} was reported as existing but cannot be described; retry"
        )
    report = TopicReport(name, False, partitions, actual_partitions)
    if actual_partitions != partitions:
        report.mismatches.append(f"partitions: expected {partitions}, found {actual_partitions}")
    if not wanted:
        return report

    configs = topic_configs(admin, name, timeout_s)
    for key, value in sorted(wanted.items()):
        found = configs.get(key)
        if found is None:
            report.unknown_configs.append(key)
        elif _normalise(found) != _normalise(value):
            report.mismatches.append(f"{key}: expected {value!r}, found {found!r}")
    return report


def topic_configs(admin: AdminClient, topic: str, timeout_s: float) -> dict[str, str]:
    """The configs the broker reports for ``topic``. A key it does not report is absent:
    "broker default, unknown" (the embedded broker reports only the keys set at creation)."""
    resource = ConfigResource("topic", topic)
    try:
        entries = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(
            timeout=timeout_s
        )
    except KafkaException as exc:
        raise ChangelogTopicError(
            f"cannot read the configs of topic {topic!r}: {exc.args[0].str()}"
        ) from exc
    return {key: entry.value for key, entry in entries.items() if entry.value is not None}


def partition_count(admin: AdminClient, topic: str, timeout_s: float = 10.0) -> int | None:
    """Number of partitions of ``topic``, or None when it does not exist (never creates it)."""
    description = describe_topic(admin, topic, timeout_s)
    return None if description is None else len(description.partitions)


def describe_topic(admin: AdminClient, topic: str, timeout_s: float = 10.0) -> Any | None:
    """The broker's ``TopicDescription`` of ``topic`` (partitions with their replicas), or
    None when it does not exist (never creates it)."""
    future = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)[topic]
    try:
        return future.result(timeout=timeout_s)
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return None
        if error.code() in _UNREACHABLE:
            raise BrokerUnavailableError(
                f"cannot describe topic {topic!r}: broker did not answer ({error.str()})"
            ) from exc
        raise ChangelogTopicError(f"cannot describe topic {topic!r}: {error.str()}") from exc


def wait_for_broker(bootstrap: str, timeout_s: float = 15.0, **overrides: Any) -> ClusterMetadata:
    """Block until the cluster answers a metadata request; return that metadata.

    A plain TCP probe runs first, so an unreachable address fails within ``timeout_s``
    without librdkafka's reconnect log spam; ``overrides`` (e.g. security settings) go to
    the AdminClient used for the metadata request.
    """
    deadline = time.monotonic() + timeout_s
    servers = _parse_bootstrap(bootstrap)
    last_error = "no attempt made"
    while True:
        reachable, last_error = _tcp_probe(servers, deadline)
        if reachable:
            break
        if time.monotonic() >= deadline:
            raise BrokerUnavailableError(
                f"Kafka broker {bootstrap} unreachable after {timeout_s:g}s ({last_error}); "
                "start one with `statekeeper broker start` or set STATEKEEPER_BOOTSTRAP_SERVERS"
            )
        time.sleep(0.1)

    remaining = max(deadline - time.monotonic(), 1.0)
    try:
        return make_admin(bootstrap, **overrides).list_topics(timeout=remaining)
    except KafkaException as exc:
        raise BrokerUnavailableError(
            f"Kafka broker {bootstrap} accepts connections but did not answer a metadata "
            f"request within {timeout_s:g}s ({exc.args[0].str()}); is it still starting, "
            "or is it not a Kafka broker?"
        ) from exc


def _tcp_probe(servers: list[tuple[str, int]], deadline: float) -> tuple[bool, str]:
    error = "no servers"
    for host, port in servers:
        timeout = min(max(deadline - time.monotonic(), 0.05), 1.0)
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return True, ""
        except OSError as exc:
            error = f"{host}:{port}: {exc.strerror or exc}"
    return False, error


def _parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    servers = []
    for item in bootstrap.split(","):
        item = item.strip().split("://", 1)[-1]
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"bad bootstrap server {item!r} in {bootstrap!r}: expected host:port")
        servers.append((host.strip("[]"), int(port)))
    return servers


def _config_text(value: Any) -> str:
    # Kafka configs are strings; Python booleans must become "true"/"false".
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _normalise(value: str) -> str:
    # List-valued configs such as cleanup.policy=compact,delete compare as sets.
    parts = sorted(p.strip().lower() for p in value.split(","))
    return ",".join(parts)
