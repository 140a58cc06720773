"""``migrate_app`` on Spark (local[2]): one Spark task per stream task, the same result as
the local loop — v2's stores, restored from v2's changelogs alone, hold every v1 value
migrated, at v1's batch id and source offsets; and a re-keying migration (another task
count) on Spark and locally."""

from __future__ import annotations

import json
import uuid

from confluent_kafka import Producer

from statekeeper.app.spec import load_app_spec
from statekeeper.app.topics import prepare_topics
from statekeeper.cli import main
from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.model import OffsetRange
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.kafka.partitioning import partition_for_key
from statekeeper.migration import migrate_app
from statekeeper.migration.job import prepare_migration
from statekeeper.state.environment import StateEnvironment
from statekeeper.upgrade import verify_migration
from statekeeper.worker.task_run import TaskRun
from statekeeper.worker.task_runner import close_worker_services, run_share, settings_to_json
from tests.integration.test_state_migration import (
    _produce_words,
    _read_back,
    _run_v1,
    _settings,
    _write_specs,
)

PARTITIONS = 3


def test_migrate_on_spark(spark, broker, admin, topic_name, tmp_path, capsys) -> None:
    ensure_topic(admin, topic_name, PARTITIONS)
    old_app, new_app = (f"mig-s{v}-{uuid.uuid4().hex[:6]}" for v in ("1", "2"))
    v1_path, v2_path = _write_specs(tmp_path / "app", topic_name, old_app, new_app)
    v1_spec, v2_spec = load_app_spec(v1_path), load_app_spec(v2_path)
    v1_settings = _settings(broker, tmp_path / "state", old_app)
    v2_settings = _settings(broker, tmp_path / "state", new_app)
    sent = _produce_words(
        broker.bootstrap_servers, topic_name, 60, vocabulary=11, partitions=PARTITIONS
    )
    v1 = v1_spec.build_topology()
    prepare_topics(admin, v1, old_app, 30.0)
    ends = [sum(c.values()) for c in sent]
    _run_v1(v1_settings, v1, topic_name, 3, [(0, end) for end in ends], snapshot="req-1")
    close_worker_services()

    report = migrate_app(
        v1_spec,
        v2_spec,
        old_settings=v1_settings,
        new_settings=v2_settings,
        spark_context=spark.sparkContext,
    )
    assert report.on_spark
    assert sorted(t.task_id for t in report.tasks) == [f"0_{p}" for p in range(PARTITIONS)]
    assert all(t.batch_id == 3 and t.snapshots for t in report.tasks)
    v2 = v2_spec.build_topology()
    for p in range(PARTITIONS):
        stores, batch, offsets = _read_back(
            v2_settings.model_copy(update={"state_dir": tmp_path / "fresh"}), v2, f"0_{p}"
        )
        assert stores["counts"] == {w: {"count": n, "from": "v1"} for w, n in sent[p].items()}
        assert (batch, offsets) == (3, {f"{topic_name}:{p}": ends[p]})

    # The command runs on the active session (it does not stop a session it did not make).
    v3_path = v2_path.with_name("v3.yaml")
    v3_path.write_text(v2_path.read_text().replace(new_app, f"{new_app}-3"))
    code = main(
        ["upgrade", "migrate", "--app", str(v3_path), "--from", str(v1_path), "--json"]
        + ["--bootstrap", broker.bootstrap_servers, "--set", f"state_dir={tmp_path / 'state'}"]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    payload = json.loads(out.out)
    assert payload["on_spark"] and len(payload["tasks"]) == PARTITIONS
    assert spark.sparkContext.parallelize([1]).count() == 1  # still running


REKEY_TOPOLOGY = """
from statekeeper.processing.dsl import Grouped, Materialized, StreamsBuilder


def build(topic, words=None, value_serde="int"):
    builder = StreamsBuilder()
    grouped = Grouped.as_("words").with_key_serde("str").with_value_serde("str")
    if words is not None:
        grouped = grouped.with_partitions(int(words))
    builder.stream(topic, key_serde="str", value_serde="str").group_by(
        lambda _key, value: value, grouped
    ).count(Materialized.as_("counts").with_serdes("str", value_serde))
    return builder.build()


def counts_v2(key, value):
    return key, {"count": value}
"""


def _rekey_specs(folder, topic: str, old_app: str, new_apps: list[str], words: int):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "topology.py").write_text(REKEY_TOPOLOGY)
    v1 = folder / "v1.yaml"
    v1.write_text(
        f"application_id: {old_app}\ntopology: topology.py:build\nparams: {{topic: {topic}}}\n"
    )
    news = []
    for app in new_apps:
        path = folder / f"{app}.yaml"
        path.write_text(
            f"application_id: {app}\ntopology: topology.py:build\n"
            f"params: {{topic: {topic}, words: {words}, value_serde: json}}\n"
            "migrations:\n  counts: {record: topology.py:counts_v2}\n"
        )
        news.append(path)
    return v1, news


def test_a_rekeying_migration_on_spark_and_locally(
    spark, broker, admin, topic_name, tmp_path
) -> None:
    """v1 counts words (values of the input) in 3 tasks behind a repartition topic; v2 in 5:
    each of v2's tasks holds exactly the words its repartition topic routes to it, with
    every old task's repartition offsets in its markers, on Spark and locally alike; the
    cut-over's verification reads it back key by key."""
    ensure_topic(admin, topic_name, PARTITIONS)
    suffix = uuid.uuid4().hex[:6]
    old_app, spark_app, local_app = (f"rk-{v}-{suffix}" for v in ("v1", "spark", "local"))
    v1_path, (spark_path, local_path) = _rekey_specs(
        tmp_path / "app", topic_name, old_app, [spark_app, local_app], words=5
    )
    v1_spec = load_app_spec(v1_path)
    v1_settings = _settings(broker, tmp_path / "state", old_app)
    v1 = v1_spec.build_topology()
    prepare_topics(admin, v1, old_app, 30.0)
    producer = Producer(producer_config(broker.bootstrap_servers))
    expected: dict[str, int] = {}
    for i in range(150):
        word = f"w{i % 13}"  # the value: group_by counts values
        producer.produce(topic_name, word.encode(), b"k", partition=i % PARTITIONS)
        expected[word] = expected.get(word, 0) + 1
    assert producer.flush(15) == 0
    sources = log_end_offsets(
        consumer_config(broker.bootstrap_servers, group_id="rk"),
        [(topic_name, p) for p in range(PARTITIONS)],
        30.0,
    )
    settings_json = settings_to_json(v1_settings)

    def run(runs):
        results = run_share(0, [runs], uuid.uuid4().hex, v1, settings_json)
        assert all(getattr(r, "committed", True) for r in results)

    run(
        [
            TaskRun(
                f"0_{p}",
                0,
                p,
                (OffsetRange(topic_name, p, 0, sources[(topic_name, p)]),),
                2,
                2_000,
                force_commit=True,
            )
            for p in range(PARTITIONS)
        ]
    )
    rep = f"{old_app}-words-repartition"
    ends = log_end_offsets(
        consumer_config(broker.bootstrap_servers, group_id="rk"),
        [(rep, p) for p in range(PARTITIONS)],
        30.0,
    )
    run(
        [
            TaskRun(
                f"1_{p}",
                1,
                p,
                (OffsetRange(rep, p, 0, ends[(rep, p)]),),
                2,
                2_000,
                force_commit=True,
            )
            for p in range(PARTITIONS)
        ]
    )
    close_worker_services()
    # The Spark checkpoint a v1 driver would have left: batch 2 ended at the sources' ends
    # (the stateless splitter takes over there).
    checkpoint = v1_settings.checkpoint_path()
    for folder, text in (
        (
            "offsets",
            'v1\n{"batchWatermarkMs":0,"batchTimestampMs":2000,"conf":{}}\n'
            + json.dumps(
                {topic_name: {str(p): sources[(topic_name, p)] for p in range(PARTITIONS)}}
            ),
        ),
        ("commits", 'v1\n{"nextBatchWatermarkMs":0}'),
    ):
        (checkpoint / folder).mkdir(parents=True, exist_ok=True)
        (checkpoint / folder / "2").write_text(text)

    for path, app, context in (
        (spark_path, spark_app, spark.sparkContext),
        (local_path, local_app, None),
    ):
        spec = load_app_spec(path)
        settings = _settings(broker, tmp_path / "state", app)
        report = migrate_app(
            v1_spec, spec, old_settings=v1_settings, new_settings=settings, spark_context=context
        )
        subtopology_1 = [t for t in report.tasks if t.task_id.startswith("1_")]
        assert [t.task_id for t in subtopology_1] == [f"1_{p}" for p in range(5)]
        assert all(
            t.batch_id == 2
            and t.source_offsets == {f"{rep}:{p}": ends[(rep, p)] for p in range(PARTITIONS)}
            for t in subtopology_1
        ), [t.as_dict() for t in subtopology_1]
        v2 = spec.build_topology()
        fresh = settings.model_copy(update={"state_dir": tmp_path / "fresh" / app})
        total: dict[str, int] = {}
        for p in range(5):
            stores, batch, _ = _read_back_sub(fresh, v2, f"1_{p}")
            for word, entry in stores["counts"].items():
                assert partition_for_key(word.encode(), 5) == p, (word, p)
                total[word] = entry["count"]
        assert total == expected
        prepared = prepare_migration(
            v1_spec, spec, v1_settings, settings, snapshot=False, create_topics=False
        )
        checked = verify_migration(prepared.job, [f"1_{p}" for p in range(5)])
        assert checked.ok, checked.as_dict()
        assert checked.totals()["expected_different"] == len(expected)


def _read_back_sub(settings, topology, task_id: str):
    sub, partition = (int(x) for x in task_id.split("_"))
    env = StateEnvironment(settings, read_only=True)
    try:
        with env.task(task_id, partition, topology.store_specs(sub)) as task:
            return (
                {name: dict(store.all()) for name, store in task.stores.items()},
                task.last_batch_id,
                task.committed_offsets,
            )
    finally:
        env.close()
