"""``drill --spark`` of the v2 apps on state migrated from v1: the shipped drill models
(spark_apps/word_count_v2/drill_model.py, spark_apps/patient_monitoring_v2/drill_model.py)
recompute v2's semantics over the whole input, which v1 processed, and the migrated state
passes. A v2 whose state was migrated wrong (one value off: consistent changelogs and
snapshots, so integrity and consistency pass, and the own-topology re-run is skipped for
migrated state) fails the PySpark check, naming the key, and only that check: the model is
what catches it.

v1 runs in-process (the stream tasks over the input, committed, as Spark tasks run them);
word_count's stateless splitter takes over where v1's Spark checkpoint says its last
micro-batch ended, so that checkpoint is written as a v1 driver would have left it."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Producer

from spark_apps.word_count.generator import word_count_lines
from statekeeper.app.spec import load_app_spec
from statekeeper.app.store_reader import read_store
from statekeeper.app.topics import prepare_topics
from statekeeper.cli import main
from statekeeper.generate.producer import produce
from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.model import OffsetRange
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.testing.app_process import spark_app_spec
from statekeeper.worker.task_run import TaskRun
from statekeeper.worker.task_runner import close_worker_services, run_share, settings_to_json

PARTITIONS = 2
TIMEOUT = 30.0

WRONG_WORD_COUNTS = """
def word_counts_v2(word, count):
    return word, {"count": count + (1 if word == WRONG else 0), "first_seen_ms": None}
"""

WRONG_HEART_RATE = """
def heart_rate_v2(patient, entry):
    bpm = entry["bpm"] + (1 if patient == WRONG else 0)
    start = entry["window_start"]
    return patient, {"bpm": bpm, "window_start": start, "window_end": start + 60000}
"""


def _spec(shipped: str, path: Path, app_id: str, params: dict, settings: dict) -> Path:
    """A shipped spec re-targeted (id, topics, state) at ``path``."""
    raw = load_app_spec(spark_app_spec(shipped)).model_dump(by_alias=True)
    raw.update(application_id=app_id, enabled=True)
    raw["params"] = {**raw["params"], **params}
    raw["settings"] = {**raw["settings"], **settings}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(raw))
    return path


def _wrong(spec: Path, store: str, code: str, wrong_key: str) -> Path:
    """``spec`` as another app whose migration of ``store`` gets ``wrong_key`` wrong."""
    raw = yaml.safe_load(spec.read_text())
    raw["application_id"] += "-wrong"
    module = spec.with_name("wrong_migrations.py")
    module.write_text(f"WRONG = {wrong_key!r}\n{code}")
    function = raw["migrations"][store]["record"].rpartition(":")[2]
    raw["migrations"][store]["record"] = f"{module}:{function}"
    path = spec.with_name(f"{raw['application_id']}.yaml")
    path.write_text(yaml.safe_dump(raw))
    return path


def _migrate(new: Path, old: Path, capsys: Any) -> None:
    argv = ["upgrade", "migrate", "--app", str(new), "--from", str(old), "--local"]
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()


def _a_key(spec_path: Path, store: str) -> str:
    """The first key (sorted) of ``store`` in the migrated app of ``spec_path``."""
    spec = load_app_spec(spec_path)
    found = read_store(spec.resolved_settings(), spec.build_topology(), store, PARTITIONS)
    assert found, f"{store} is empty"
    return sorted(found)[0]


def _run(settings: Any, topology: Any, runs: list[TaskRun]) -> None:
    results = run_share(0, [runs], uuid.uuid4().hex, topology, settings_to_json(settings))
    assert all(getattr(r, "committed", True) for r in results), results


def _drill(spec: Path, tmp_path: Path, capsys: Any, *extra: str) -> tuple[int, dict]:
    report = tmp_path / f"drill-{uuid.uuid4().hex[:6]}"
    code = main(["drill", "--app", str(spec), "--json", "--report-dir", str(report), *extra])
    return code, json.loads(capsys.readouterr().out)


def _only_spark_failed(record: dict) -> None:
    """Integrity, consistency and data quality pass on the wrong state (its changelogs and
    snapshots agree with each other), the own-topology re-run is skipped (migrated state):
    the PySpark recomputation alone catches it."""
    assert record["checks"]["spark"] == "fail", record["checks"]
    others = {c: s for c, s in record["checks"].items() if c != "spark"}
    assert set(others.values()) <= {"pass", "skipped", "n/a"}, others


def _spark_checks(record: dict) -> dict[tuple[str, str], dict]:
    return {
        (s["task"], s["store"]): s["checks"]["spark"]
        for s in record["stores"]
        if "spark" in s["checks"]
    }


# ~40 s: make test-chaos only, like patient_monitoring_v2's below (make test keeps the
# upgrade's own proofs: the cut-over's key-by-key verification in the kill -9 series, and
# the drill of a non-migrated app in tests/spark/test_drill_spark.py).
@pytest.mark.chaos
def test_word_count_v2_drill_of_migrated_state(broker, admin, spark, tmp_path, capsys) -> None:
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    lines = f"lines-{suffix}"
    settings = {
        "bootstrap_servers": bootstrap,
        "state_dir": str(tmp_path / "state"),
        "checkpoint_dir": str(tmp_path / "ckpt"),
        "status_port": None,
        # the worker uploads its snapshots: run_share runs here without a driver
        "executor_services_process": False,
    }
    v1_path = _spec(
        "word_count",
        tmp_path / "app" / "v1.yaml",
        f"wc-{suffix}",
        {"input_topic": lines, "output_topic": f"wc-{suffix}"},
        settings,
    )
    v2_path = _spec(
        "word_count_v2",
        tmp_path / "app" / "v2.yaml",
        f"wc-{suffix}-v2",
        {"input_topic": lines, "output_topic": f"wc2-{suffix}"},
        settings,
    )
    v1_spec = load_app_spec(v1_path)
    v1_settings, v1 = v1_spec.resolved_settings(), v1_spec.build_topology()
    ensure_topic(admin, lines, PARTITIONS)
    produce(bootstrap, lines, word_count_lines(300, seed=7), partitions=PARTITIONS)
    prepare_topics(admin, v1, v1_spec.application_id, TIMEOUT)
    conf = consumer_config(bootstrap, group_id="drill-v2")
    ends = log_end_offsets(conf, [(lines, p) for p in range(PARTITIONS)], TIMEOUT)
    # v1's micro-batch 2: the splitter over every line, then the counters over every word.
    _run(
        v1_settings,
        v1,
        [
            TaskRun(
                f"0_{p}",
                0,
                p,
                (OffsetRange(lines, p, 0, ends[(lines, p)]),),
                2,
                2_000,
                force_commit=True,
            )
            for p in range(PARTITIONS)
        ],
    )
    [rep] = v1.internal_topics(v1_spec.application_id)
    rep_ends = log_end_offsets(conf, [(rep, p) for p in range(PARTITIONS)], TIMEOUT)
    _run(
        v1_settings,
        v1,
        [
            TaskRun(
                f"1_{p}",
                1,
                p,
                (OffsetRange(rep, p, 0, rep_ends[(rep, p)]),),
                2,
                2_000,
                force_commit=True,
            )
            for p in range(PARTITIONS)
        ],
    )
    close_worker_services()
    checkpoint = v1_settings.checkpoint_path()
    offsets = {lines: {str(p): ends[(lines, p)] for p in range(PARTITIONS)}}
    for folder, text in (
        ("offsets", 'v1\n{"batchWatermarkMs":0,"batchTimestampMs":2000,"conf":{}}\n'),
        ("commits", 'v1\n{"nextBatchWatermarkMs":0}'),
    ):
        (checkpoint / folder).mkdir(parents=True, exist_ok=True)
        extra = json.dumps(offsets) if folder == "offsets" else ""
        (checkpoint / folder / "2").write_text(text + extra)

    _migrate(v2_path, v1_path, capsys)
    word = _a_key(v2_path, "word-counts")
    wrong_path = _wrong(v2_path, "word-counts", WRONG_WORD_COUNTS, word)
    _migrate(wrong_path, v1_path, capsys)

    code, record = _drill(v2_path, tmp_path, capsys, "--spark")
    assert code == 0 and record["passed"], record["failures"]
    checked = _spark_checks(record)
    assert set(checked) == {(f"1_{p}", "word-counts") for p in range(PARTITIONS)}, checked
    assert all(c["status"] == "pass" for c in checked.values()), checked
    counted = [s for s in record["stores"] if s["store"] == "word-counts"]
    assert sum(s["key_count"] for s in counted) > 20
    # The own-topology re-run is skipped for migrated state, saying why.
    truth = {s["checks"]["truth"]["status"] for s in counted}
    assert truth == {"skipped"}, counted[0]["checks"]["truth"]
    assert "migrated from" in counted[0]["checks"]["truth"]["detail"]

    code, record = _drill(wrong_path, tmp_path, capsys, "--spark")
    assert code == 1 and not record["passed"]
    failed = [c for c in _spark_checks(record).values() if c["status"] == "fail"]
    assert len(failed) == 1 and failed[0]["examples"] == [word], failed
    _only_spark_failed(record)


# ~50 s: make test-chaos only.
@pytest.mark.chaos
def test_patient_monitoring_v2_drill_of_migrated_state(
    broker, admin, spark, tmp_path, capsys
) -> None:
    from spark_apps.patient_monitoring import generator
    from statekeeper.generate.records import place_records

    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    events = f"events-{suffix}"
    settings = {
        "bootstrap_servers": bootstrap,
        "state_dir": str(tmp_path / "state"),
        "checkpoint_dir": str(tmp_path / "ckpt"),
        "status_port": None,
        # the worker uploads its snapshots: run_share runs here without a driver
        "executor_services_process": False,
    }
    topics = {"input_topic": events}
    v1_path = _spec(
        "patient_monitoring",
        tmp_path / "app" / "v1.yaml",
        f"pm-{suffix}",
        {**topics, "heart_rate_topic": f"hr-{suffix}", "alerts_topic": f"al-{suffix}"},
        settings,
    )
    v2_path = _spec(
        "patient_monitoring_v2",
        tmp_path / "app" / "v2.yaml",
        f"pm-{suffix}-v2",
        {**topics, "heart_rate_topic": f"hr2-{suffix}", "alerts_topic": f"al2-{suffix}"},
        settings,
    )
    v1_spec = load_app_spec(v1_path)
    v1_settings, v1 = v1_spec.resolved_settings(), v1_spec.build_topology()
    ensure_topic(admin, events, PARTITIONS)
    prepare_topics(admin, v1, v1_spec.application_id, TIMEOUT)
    generated = generator.patient_events(patients=8, minutes=6, seed=5, malformed_share=0.02)
    placed = place_records(generated, events, PARTITIONS)
    producer = Producer(producer_config(bootstrap))
    for p, records in placed.items():
        for r in records:
            producer.produce(events, r.value, r.key, partition=p, timestamp=r.timestamp_ms)
    assert producer.flush(TIMEOUT) == 0
    for batch, share in ((1, 2), (2, 1)):  # two commits: 1/2 of the events, then the rest
        _run(
            v1_settings,
            v1,
            [
                TaskRun(
                    f"0_{p}",
                    0,
                    p,
                    (
                        OffsetRange(
                            events,
                            p,
                            0 if batch == 1 else len(placed[p]) // 2,
                            len(placed[p]) // share,
                        ),
                    ),
                    batch,
                    10**6 + batch,
                    force_commit=True,
                )
                for p in range(PARTITIONS)
            ],
        )
    close_worker_services()
    _migrate(v2_path, v1_path, capsys)
    patient = _a_key(v2_path, "heart-rate")
    wrong_path = _wrong(v2_path, "heart-rate", WRONG_HEART_RATE, patient)
    _migrate(wrong_path, v1_path, capsys)

    code, record = _drill(v2_path, tmp_path, capsys, "--spark")
    assert code == 0 and record["passed"], record["failures"]
    checked = _spark_checks(record)
    stores = {store for _task, store in checked}
    assert stores == {"pulse-counts", "heart-rate"}, checked  # temperature-peaks: no model
    assert all(c["status"] == "pass" for c in checked.values()), checked
    rates = [s for s in record["stores"] if s["store"] == "heart-rate"]
    assert sum(s["key_count"] for s in rates) > 0

    code, record = _drill(wrong_path, tmp_path, capsys, "--spark")
    assert code == 1 and not record["passed"]
    failed = [(k, c) for k, c in _spark_checks(record).items() if c["status"] == "fail"]
    assert [k[1] for k, _ in failed] == ["heart-rate"], failed
    assert failed[0][1]["examples"] == [patient], failed
    _only_spark_failed(record)
