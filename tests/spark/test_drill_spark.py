"""``drill --spark``: word_count's restored count store against its PySpark SQL
recomputation, with the count tasks behind their repartition topic (the inputs are bounded
by the ``sk.source`` headers of what they processed)."""

from __future__ import annotations

import dataclasses
import json
import uuid

from confluent_kafka import Producer

from spark_apps.word_count.drill_model import spark_models
from spark_apps.word_count.topology import build_topology
from statekeeper.app.topics import prepare_topics
from statekeeper.cli import main
from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.model import OffsetRange, tp_key
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.kafka.range_reader import read_ranges
from statekeeper.ops.drill.sandbox import restore_sandbox
from statekeeper.ops.drill.spark_check import check_with_spark
from statekeeper.processing.output_producer import OutputProducer
from statekeeper.processing.stream_task import StreamTask
from statekeeper.settings import load_settings
from statekeeper.state.environment import StateEnvironment
from statekeeper.testing.app_process import SPARK_APPS

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]
TIMEOUT = 20.0


def _run_word_count(admin, broker, tmp_path):
    """word_count run in-process: both upstream tasks over all lines, then each count task
    over the first 70 % of its repartition partition (so it is behind the lines topic)."""
    app_id = f"wc-drill-{uuid.uuid4().hex[:8]}"
    lines, out = f"{app_id}-lines", f"{app_id}-counts"
    from statekeeper.kafka.admin import ensure_topic

    ensure_topic(admin, lines, 2)
    params = {"input_topic": lines, "output_topic": out}
    topology = build_topology(**params)
    prepare_topics(admin, topology, app_id, TIMEOUT)
    producer = Producer(producer_config(broker.bootstrap_servers))
    for i in range(120):
        text = " ".join(WORDS[(i * j) % len(WORDS)] for j in range(1, 1 + i % 5))
        producer.produce(lines, text.encode(), partition=i % 2, timestamp=1_000 + i)
    assert producer.flush(TIMEOUT) == 0
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        state_dir=tmp_path / "state",
        application_id=app_id,
    )
    conf = consumer_config(broker.bootstrap_servers)
    env = StateEnvironment(settings)
    outputs = OutputProducer(broker.bootstrap_servers)
    try:
        for p in (0, 1):
            records = read_ranges(conf, [OffsetRange(lines, p, 0, 60)], TIMEOUT)
            with env.task(f"0_{p}", p, topology.store_specs(0)) as task:
                StreamTask(topology, 0, p, task, outputs, app_id).process_batch(0, 5, records)
            outputs.flush(TIMEOUT)
        [repartition] = topology.internal_topics(app_id)
        ends = log_end_offsets(conf, [(repartition, 0), (repartition, 1)], TIMEOUT)
        for p in (0, 1):
            end = ends[(repartition, p)] * 7 // 10
            records = read_ranges(conf, [OffsetRange(repartition, p, 0, end)], TIMEOUT)
            with env.task(f"1_{p}", p, topology.store_specs(1)) as task:
                StreamTask(topology, 1, p, task, outputs, app_id).process_batch(0, 5, records)
                outputs.flush(TIMEOUT)
                task.commit(0, {tp_key(repartition, p): end})
    finally:
        outputs.close()
        env.close()
    spec = tmp_path / "wc.yaml"
    spec.write_text(
        f"application_id: {app_id}\ntopology: spark_apps.word_count.topology:build_topology\n"
        f"drill_model: {SPARK_APPS / 'word_count' / 'drill_model.py'}:spark_models\n"
        f"params: {json.dumps(params)}\n"
        f"settings: {{bootstrap_servers: '{broker.bootstrap_servers}', "
        f"state_dir: '{tmp_path / 'state'}'}}\n"
    )
    return spec, settings, topology, params


def test_drill_spark_matches_word_count_and_names_a_wrong_key(
    admin, broker, spark, tmp_path, capsys
):
    spec, settings, topology, params = _run_word_count(admin, broker, tmp_path)
    argv = ["drill", "--app", str(spec), "--from-snapshot", "none", "--spark", "--json"]
    assert main([*argv, "--report-dir", str(tmp_path / "r1")]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["checks"]["spark"] == "pass" and record["passed"], record["failures"]
    counted = [s for s in record["stores"] if s["store"] == "word-counts"]
    assert len(counted) == 2 and all(s["key_count"] > 0 for s in counted)
    assert all("PySpark SQL word count" in s["checks"]["spark"]["detail"] for s in counted)
    assert record["source_records_behind"] > 0  # the count tasks were behind: bounds mattered
    # The 70 % cut splits one line's words: the keys of that line are left out, the rest match.
    details = [s["checks"]["spark"]["detail"] for s in counted]
    assert any("partly processed input record not compared" in d for d in details), details

    # A recomputation that disagrees on one word fails the check, naming it.
    [model] = spark_models(params)

    def off_by_one(spark, records):
        counts = model.expected(spark, records)
        counts["alpha"] = counts.get("alpha", 0) + 1
        return counts

    wrong = dataclasses.replace(model, expected=off_by_one)
    restored = restore_sandbox(settings, topology, None, tmp_path / "sandbox", from_snapshot="none")
    results = check_with_spark(settings, topology, restored.tasks, [wrong])
    failed = [r for r in results.values() if r.failed]
    assert len(failed) == 1 and failed[0].examples == ["alpha"]
    assert failed[0].counts == {"differ": 1, "missing": 0, "unexpected": 0}


def test_drill_spark_matches_patient_monitoring(admin, broker, spark, tmp_path, capsys):
    from spark_apps.patient_monitoring import generator
    from spark_apps.patient_monitoring.topology import build_topology as patient_topology
    from statekeeper.generate.records import place_records
    from statekeeper.kafka.admin import ensure_topic

    app_id = f"pm-drill-{uuid.uuid4().hex[:8]}"
    events = f"{app_id}-events"
    params = {
        "input_topic": events,
        "heart_rate_topic": f"{app_id}-hr",
        "alerts_topic": f"{app_id}-alerts",
    }
    ensure_topic(admin, events, 1)
    topology = patient_topology(**params)
    prepare_topics(admin, topology, app_id, TIMEOUT)
    generated = generator.patient_events(patients=8, minutes=6, seed=3, malformed_share=0.02)
    placed = place_records(generated, events, 1)
    producer = Producer(producer_config(broker.bootstrap_servers))
    for p, records in placed.items():
        for r in records:
            producer.produce(events, r.value, r.key, partition=p, timestamp=r.timestamp_ms)
    assert producer.flush(TIMEOUT) == 0
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        state_dir=tmp_path / "state",
        application_id=app_id,
    )
    conf = consumer_config(broker.bootstrap_servers)
    env = StateEnvironment(settings)
    outputs = OutputProducer(broker.bootstrap_servers)
    try:
        for p, records in placed.items():
            cuts = [0, len(records) // 3, 2 * len(records) // 3, len(records)]
            with env.task(f"0_{p}", p, topology.store_specs(0)) as task:
                for batch, (start, end) in enumerate(zip(cuts, cuts[1:], strict=False)):
                    got = read_ranges(conf, [OffsetRange(events, p, start, end)], TIMEOUT)
                    StreamTask(topology, 0, p, task, outputs, app_id).process_batch(
                        batch, 10**6 + batch, got
                    )
                    outputs.flush(TIMEOUT)
                    task.commit(batch, {tp_key(events, p): end})
    finally:
        outputs.close()
        env.close()
    spec = tmp_path / "pm.yaml"
    spec.write_text(
        f"application_id: {app_id}\n"
        "topology: spark_apps.patient_monitoring.topology:build_topology\n"
        f"drill_model: {SPARK_APPS / 'patient_monitoring' / 'drill_model.py'}:spark_models\n"
        f"params: {json.dumps(params)}\n"
        f"settings: {{bootstrap_servers: '{broker.bootstrap_servers}', "
        f"state_dir: '{tmp_path / 'state'}'}}\n"
    )
    argv = ["drill", "--app", str(spec), "--from-snapshot", "none", "--spark", "--json"]
    assert main(argv) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["passed"], record["failures"]
    checked = {
        (s["task"], s["store"]): s["checks"]["spark"]
        for s in record["stores"]
        if "spark" in s["checks"]
    }
    assert set(checked) == {("0_0", "pulse-counts"), ("0_0", "heart-rate")}
    assert all(c["status"] == "pass" for c in checked.values()), checked
    pulses = [s for s in record["stores"] if s["store"] == "pulse-counts"]
    assert sum(s["key_count"] for s in pulses) > 0
