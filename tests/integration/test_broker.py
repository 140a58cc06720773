"""The embedded broker, the Kafka helpers and the `statekeeper broker` CLI against Tansu."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource

from statekeeper.errors import BrokerUnavailableError, ChangelogTopicError, ConfigError
from statekeeper.kafka.adapter import (
    KAFKA,
    consumer_config,
    detect_profile,
    producer_config,
)
from statekeeper.kafka.admin import ensure_topic, make_admin, partition_count, wait_for_broker
from statekeeper.kafka.embedded import EmbeddedBroker, free_port

Record = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]


def read_to_eof(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 15.0
) -> list[Record]:
    """(partition, key, value, headers) of every record, reading each partition to EOF."""
    consumer = Consumer(consumer_config(bootstrap))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: list[Record] = []
    at_eof: set[int] = set()
    deadline = time.monotonic() + timeout_s
    try:
        while len(at_eof) < partitions:
            assert time.monotonic() < deadline, f"no EOF on {topic} after {timeout_s}s"
            for msg in consumer.consume(num_messages=10_000, timeout=0.05):
                error = msg.error()
                if error is not None:
                    assert error.code() == KafkaError._PARTITION_EOF, error
                    at_eof.add(msg.partition())
                    continue
                records.append((msg.partition(), msg.key(), msg.value(), msg.headers() or []))
    finally:
        consumer.close()
    return records


def produce(bootstrap: str, topic: str, records: list[Record]) -> None:
    producer = Producer(producer_config(bootstrap))
    for partition, key, value, headers in records:
        producer.produce(topic, value=value, key=key, partition=partition, headers=headers)
    assert producer.flush(15) == 0, "records not acknowledged"


def test_roundtrip_keys_headers_and_tombstone(broker: EmbeddedBroker, admin: Any, topic_name: str):
    ensure_topic(admin, topic_name, 2, {"cleanup.policy": "compact"})
    sent: list[Record] = [
        (0, b"k1", b"v1", [("app", b"demo"), ("batch", b"7")]),
        (1, b"k2", b"v2", []),
        (0, b"k1", None, [("app", b"demo")]),  # tombstone: null value, key kept
    ]
    produce(broker.bootstrap_servers, topic_name, sent)

    got = read_to_eof(broker.bootstrap_servers, topic_name, 2)

    assert sorted(got, key=lambda r: (r[0], r[1])) == sorted(sent, key=lambda r: (r[0], r[1]))
    tombstone = [r for r in got if r[2] is None]
    assert tombstone == [(0, b"k1", None, [("app", b"demo")])]


def test_ensure_topic_creates_then_checks(admin: Any, topic_name: str):
    created = ensure_topic(admin, topic_name, 2, {"cleanup.policy": "compact"})
    assert created.created and created.ok
    assert partition_count(admin, topic_name) == 2

    again = ensure_topic(admin, topic_name, 2, {"cleanup.policy": "compact"})
    assert not again.created and again.ok and again.unknown_configs == []

    with pytest.raises(ChangelogTopicError, match="partitions: expected 3, found 2") as info:
        ensure_topic(admin, topic_name, 3, {"cleanup.policy": "compact"})
    assert info.value.report.mismatches == ["partitions: expected 3, found 2"]  # type: ignore[attr-defined]

    report = ensure_topic(
        admin, topic_name, 2, {"cleanup.policy": "delete"}, raise_on_mismatch=False
    )
    assert report.mismatches == ["cleanup.policy: expected 'delete', found 'compact'"]


def test_config_absent_from_describe_is_unknown_not_mismatch(admin: Any, topic_name: str):
    ensure_topic(admin, topic_name, 1, {"cleanup.policy": "compact"})
    report = ensure_topic(
        admin,
        topic_name,
        1,
        {"cleanup.policy": "compact", "segment.ms": 3_600_000},
        raise_on_mismatch=False,
    )
    resource = ConfigResource("topic", topic_name)
    described = admin.describe_configs([resource])[resource].result(timeout=10)
    if "segment.ms" in described:
        pytest.skip("this broker reports defaults, so nothing is absent")
    assert report.ok
    assert report.unknown_configs == ["segment.ms"]
    assert "not reported by the broker: segment.ms" in report.describe()


def test_partition_count_of_missing_topic_is_none_and_creates_nothing(admin: Any, topic_name: str):
    assert partition_count(admin, topic_name) is None
    assert topic_name not in admin.list_topics(timeout=10).topics


def test_wait_for_broker_on_closed_port_fails_fast():
    port = free_port()
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match=f"127.0.0.1:{port} unreachable"):
        wait_for_broker(f"127.0.0.1:{port}", timeout_s=0.5)
    assert time.monotonic() - started < 3


def test_wait_for_broker_returns_metadata(broker: EmbeddedBroker):
    metadata = wait_for_broker(broker.bootstrap_servers, timeout_s=5)
    assert len(metadata.brokers) == 1


def test_detect_profile(broker: EmbeddedBroker, admin: Any):
    profile = detect_profile(admin)
    assert profile.name == "tansu" and profile.cluster_id == "tansu_cluster"
    assert not profile.transactions_reliable
    assert detect_profile(broker.bootstrap_servers, "kafka") == KAFKA
    with pytest.raises(ConfigError):
        detect_profile(admin, "redpanda")


# --- the CLI, in subprocesses as an operator would run it ---------------------------------


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("statekeeper")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "statekeeper.cli"]
    result = subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=60, env=os.environ.copy()
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def cli_json(*args: str) -> dict[str, Any]:
    return json.loads(cli(*args, "--json").stdout)


def _pid_gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"  # exited, not yet reaped


def test_cli_broker_start_status_stop(tmp_path: Path):
    run_dir = str(tmp_path / "run")
    started = cli_json("broker", "start", "--port", "0", "--run-dir", run_dir)
    try:
        assert started["running"] and started["storage"] == "memory"
        assert started["bootstrap_servers"] == f"127.0.0.1:{started['port']}"

        status = cli_json("broker", "status", "--run-dir", run_dir)
        assert status["running"] and status["tansu_pid"] == started["tansu_pid"]
        wait_for_broker(started["bootstrap_servers"], timeout_s=5)

        again = cli("broker", "start", "--port", "0", "--run-dir", run_dir, check=False)
        assert again.returncode == 2
        assert "already running" in again.stderr and "Traceback" not in again.stderr
    finally:
        stopped = cli_json("broker", "stop", "--run-dir", run_dir)
    assert stopped["was_running"]
    assert _pid_gone(started["tansu_pid"])

    after = cli("broker", "status", "--run-dir", run_dir, "--json", check=False)
    assert after.returncode == 3 and json.loads(after.stdout)["running"] is False
    assert cli_json("broker", "stop", "--run-dir", run_dir)["was_running"] is False


def test_cli_durable_broker_keeps_topics_across_restart(tmp_path: Path):
    run_dir, data_dir = str(tmp_path / "run"), str(tmp_path / "data")
    records: list[Record] = [(i % 2, f"k{i}".encode(), f"v{i}".encode(), []) for i in range(100)]
    records.append((0, b"k0", None, []))

    first = cli_json("broker", "start", "--port", "0", "--run-dir", run_dir, "--data-dir", data_dir)
    try:
        assert first["storage"] == "s3" and first["s3_pid"]
        admin = make_admin(first["bootstrap_servers"])
        ensure_topic(admin, "durable", 2, {"cleanup.policy": "compact"})
        produce(first["bootstrap_servers"], "durable", records)
        with pytest.raises(BrokerUnavailableError, match="in use by the broker"):
            EmbeddedBroker(data_dir=data_dir, run_dir=tmp_path / "other").start()
    finally:
        cli("broker", "stop", "--run-dir", run_dir)
    assert _pid_gone(first["tansu_pid"]) and _pid_gone(first["s3_pid"])

    second = cli_json(
        "broker", "start", "--port", "0", "--run-dir", run_dir, "--data-dir", data_dir
    )
    try:
        admin = make_admin(second["bootstrap_servers"])
        assert partition_count(admin, "durable") == 2
        got = read_to_eof(second["bootstrap_servers"], "durable", 2)
    finally:
        cli("broker", "stop", "--run-dir", run_dir)
    assert sorted(got, key=repr) == sorted(records, key=repr)


def test_embedded_broker_context_manager_cleans_up(tmp_path: Path):
    with EmbeddedBroker(run_dir=tmp_path) as running:
        pid = running.state.tansu_pid  # type: ignore[union-attr]
        assert (tmp_path / "broker.json").exists()
    assert _pid_gone(pid)
    assert not (tmp_path / "broker.json").exists()
    assert (tmp_path / "tansu.log").exists()  # logs are kept for post-mortems
