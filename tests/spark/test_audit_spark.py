"""``audit changelogs --spark``: the Spark batch read through the statekeeper_kafka source
gives the same records, distinct keys, tombstones, markers, dirty and tombstone shares as
the plain-Python read, on the same topic."""

from __future__ import annotations

import json
import random
import uuid

from confluent_kafka import Producer

from statekeeper.app.topics import prepare_topics
from statekeeper.changelog.records import MARKER_KEY, changelog_topic
from statekeeper.cli import main
from statekeeper.kafka.admin import ensure_topic
from statekeeper.ops.audit.contents import measure_changelog
from statekeeper.ops.audit.spark_contents import measure_changelog_spark
from tests.integration.test_changelog_audit import TOPOLOGY_FILE, _topology


def _fill(bootstrap: str, topic: str, partitions: int, seed: int) -> None:
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(3_000):
        key = f"k{rng.randrange(700)}".encode()
        value = None if rng.random() < 0.1 else rng.randbytes(8)
        producer.produce(topic, key=key, value=value, partition=hash(key) % partitions)
        if i % 250 == 249:
            for p in range(partitions):
                producer.produce(topic, key=MARKER_KEY, value=b"{}", partition=p)
    producer.flush(10)


def test_spark_and_plain_reads_measure_the_same(spark, broker, admin, topic_name) -> None:
    ensure_topic(admin, topic_name, 3)
    _fill(broker.bootstrap_servers, topic_name, 3, seed=5)

    plain = measure_changelog(broker.bootstrap_servers, topic_name, 3)
    by_spark = measure_changelog_spark(spark, broker.bootstrap_servers, topic_name)
    assert not plain.sampled
    assert by_spark == plain
    assert plain.records == 3_000 + 12 * 3 and plain.markers == 36
    assert 0 < plain.tombstone_share < 0.2 and plain.superseded_share > 0.7
    assert by_spark.superseded_share == plain.superseded_share
    assert by_spark.tombstone_share == plain.tombstone_share


def test_cli_audit_with_spark(spark, broker, admin, tmp_path, capsys) -> None:
    app_id = f"audit-spark-{uuid.uuid4().hex[:8]}"
    source = f"{app_id}-input"
    ensure_topic(admin, source, 2)
    prepare_topics(admin, _topology(source), app_id, timeout_s=10)
    _fill(broker.bootstrap_servers, changelog_topic(app_id, "totals"), 2, seed=6)
    (tmp_path / "topo.py").write_text(TOPOLOGY_FILE)
    spec = tmp_path / "app.yaml"
    spec.write_text(
        f"application_id: {app_id}\ntopology: topo.py:build\n"
        f"params: {{input_topic: {source}}}\n"
        f"settings: {{bootstrap_servers: '{broker.bootstrap_servers}', "
        f"state_dir: '{tmp_path / 'state'}'}}\n"
    )
    argv = ["audit", "changelogs", "--app", str(spec), "--json"]
    assert main([*argv, "--spark"]) == 0
    with_spark = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    plain = json.loads(capsys.readouterr().out)
    assert with_spark["measured_with"] == "spark" and plain["measured_with"] == "python"

    def contents(payload):
        return {t["store"]: t["contents"] for t in payload["topics"]}

    assert contents(with_spark) == contents(plain)
    assert contents(plain)["totals"]["records"] == 3_000 + 12 * 2
