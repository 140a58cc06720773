"""Base client configs and broker profiles (no broker needed)."""

from __future__ import annotations

import pytest

from statekeeper.errors import ConfigError
from statekeeper.kafka.adapter import (
    KAFKA,
    TANSU,
    consumer_config,
    kafka_client_config,
    producer_config,
    profile_for,
)
from statekeeper.kafka.range_reader import bounded_fetch_overrides


def test_consumer_config_reads_to_eof_without_committing():
    config = consumer_config("127.0.0.1:9092")
    assert config["bootstrap.servers"] == "127.0.0.1:9092"
    assert config["enable.partition.eof"] is True
    assert config["enable.auto.commit"] is False
    assert config["auto.offset.reset"] == "earliest"
    assert config["queued.min.messages"] >= 1_000_000
    assert config["fetch.max.bytes"] >= 50 * 1024 * 1024


def test_one_shot_reads_prefetch_only_what_their_ranges_need():
    wanted = {("t", 0): (0, 12_500), ("t", 1): (100, 600), ("u", 0): (5, 6)}
    overrides = bounded_fetch_overrides(wanted)
    assert overrides["queued.min.messages"] == 12_500  # the longest range
    assert overrides["max.partition.fetch.bytes"] == 1024 * 1024
    assert overrides["fetch.max.bytes"] == 3 * 1024 * 1024
    huge = {("t", p): (0, 5_000_000) for p in range(80)}
    assert bounded_fetch_overrides(huge)["queued.min.messages"] == 1_000_000
    assert bounded_fetch_overrides(huge)["fetch.max.bytes"] == 50 * 1024 * 1024
    assert bounded_fetch_overrides({})["queued.min.messages"] == 1
    # Only the read-to-EOF defaults are replaced; a setting the caller chose stays.
    conf = consumer_config("h:1", **{"max.partition.fetch.bytes": "2097152"})
    assert set(bounded_fetch_overrides(wanted, conf)) == {"queued.min.messages", "fetch.max.bytes"}


def test_producer_config_is_durable_and_batched():
    config = producer_config("h:1")
    assert config["acks"] == "all" and config["enable.idempotence"] is True
    assert config["compression.type"] == "lz4" and config["linger.ms"] == 5


def test_overrides_replace_and_none_removes():
    config = producer_config("h:1", **{"linger.ms": 50, "compression.type": None})
    assert config["linger.ms"] == 50 and "compression.type" not in config
    assert kafka_client_config("h:1", **{"client.id": "x"})["client.id"] == "x"


def test_clients_accept_the_configs():
    from confluent_kafka import Consumer, Producer

    Consumer(consumer_config("127.0.0.1:1")).close()
    Producer(producer_config("127.0.0.1:1"))


def test_profiles():
    assert profile_for("kafka") is KAFKA and profile_for("tansu") is TANSU
    assert KAFKA.transactions_reliable and not TANSU.transactions_reliable
    with pytest.raises(ConfigError, match="unknown broker flavor"):
        profile_for("nope")
