"""The output diff of a shadow run (statekeeper.upgrade.output_diff), without a broker: the
latest value per key of two versions' output records, the keys compared (the new version's,
and the old version's from the takeover's batch base on), the verdicts under the shipped
word_count_v2 and patient_monitoring_v2 specs (their outputs: declarations), and the pairs of
topics both specs name."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from statekeeper.app.spec import load_app_spec
from statekeeper.errors import ConfigError
from statekeeper.kafka.model import KafkaRecord
from statekeeper.migration.functions import StoreMigration
from statekeeper.processing.output_headers import OutputHeaders
from statekeeper.testing.app_process import spark_app_spec
from statekeeper.upgrade.output_diff import (
    OutputPair,
    TopicDiff,
    ValueRule,
    classify,
    diff_outputs,
    latest_per_key,
    output_pairs,
)


def _record(
    topic: str, partition: int, offset: int, key: str | None, value: Any, batch: int | None = 0,
    epoch: int = 0, ts: int = 0,
) -> KafkaRecord:  # fmt: skip
    headers: Any = ()
    if batch is not None:
        headers = tuple(OutputHeaders("app", f"1_{partition}", batch, epoch).next(b"src:0:0"))
    raw = None if value is None else (value if isinstance(value, str) else json.dumps(value))
    raw = None if raw is None else raw.encode()
    return KafkaRecord(
        topic, partition, offset, ts, None if key is None else key.encode(), raw, headers
    )


def test_latest_per_key_keeps_the_last_record_and_drops_fenced_writers() -> None:
    records = {
        0: [
            _record("t", 0, 0, "a", 1, batch=3),
            _record("t", 0, 1, "a", 2, batch=7, epoch=2),
            _record("t", 0, 2, "a", 99, batch=8, epoch=1),  # a frozen writer's late copy
            _record("t", 0, 3, None, 5),
            _record("t", 0, 4, "b", None, batch=9),  # a tombstone is a value
        ],
        1: [_record("t", 1, 0, "c", 4, batch=2), _record("t", 1, 1, "d", 1, batch=None)],
    }
    found = latest_per_key(records, batch_floor=7)
    assert {k: json.loads(r.value) if r.value else None for k, r in found.latest.items()} == {
        b"a": 2,
        b"b": None,
        b"c": 4,
        b"d": 1,
    }
    assert found.keyless == 1
    # Written from batch 7 on, or by a writer without sk.* headers (someone else, now).
    assert found.since_floor == {b"a", b"b", b"d"}


def _wc_rule() -> ValueRule:
    """word_count_v2's outputs.output_topic: v1 wrote the count as text, v2 the entry."""
    spec = load_app_spec(spark_app_spec("word_count_v2"))
    return ValueRule(None, (spec.output_compare_function("output_topic"),))


def test_word_count_v2_outputs_equal_expected_and_unexpected() -> None:
    old = {"kept": "3", "seen-by-v2": "2", "wrong": "5", "only-old": "1", "gone": None}
    new = {
        "kept": {"count": 3, "first_seen_ms": None},
        "seen-by-v2": {"count": 2, "first_seen_ms": 1_700},
        "wrong": {"count": 6, "first_seen_ms": None},
        "only-new": {"count": 1, "first_seen_ms": 5},
        "gone": None,
    }
    diff = classify(TopicDiff("output_topic", "wc", "wc2", ""), old, new, old | new, _wc_rule())
    assert (diff.equal, diff.expected_different, diff.unexpected) == (1, 2, 3)
    assert any("'wrong'" in e for e in diff.examples), diff.examples
    assert any("'only-new'" in e and "missing" in e for e in diff.examples), diff.examples
    # Without the declared compare, every changed value is unexpected.
    plain = classify(TopicDiff("o", "wc", "wc2", ""), old, new, old | new, ValueRule())
    assert (plain.equal, plain.expected_different, plain.unexpected) == (1, 0, 5)


def test_patient_monitoring_v2_heart_rate_outputs_are_the_store_migrated() -> None:
    """outputs.heart_rate_topic names the heart-rate store: v1's entry migrated (its window's
    end added) is v2's; a tombstone stays one; another bpm is unexpected."""
    spec = load_app_spec(spark_app_spec("patient_monitoring_v2"))
    migrate = StoreMigration("heart-rate", "record", spec.migration_function("heart-rate"))
    rule = ValueRule(migrate)
    old = {
        "p1": {"bpm": 90, "window_start": 60_000},
        "p2": None,
        "p3": {"bpm": 120, "window_start": 0},
    }
    new = {
        "p1": {"bpm": 90, "window_start": 60_000, "window_end": 120_000},
        "p2": None,
        "p3": {"bpm": 121, "window_start": 0, "window_end": 60_000},
    }
    diff = classify(TopicDiff("heart_rate_topic", "hr", "hr2", ""), old, new, old, rule)
    assert (diff.equal, diff.expected_different, diff.unexpected) == (1, 1, 1)
    assert "'p3'" in diff.examples[0] and "'window_end': 60000" in diff.examples[0]


def test_diff_outputs_compares_the_new_keys_and_the_old_keys_since_the_takeover() -> None:
    """Keys only the old version wrote before the takeover (batch < 10) are not compared;
    one it wrote after is, and is missing on the new side."""
    v1 = load_app_spec(spark_app_spec("word_count"))
    v2 = load_app_spec(spark_app_spec("word_count_v2"))
    t1, t2 = v1.build_topology(), v2.build_topology()
    topics = {
        "word-counts": {
            0: [
                _record("word-counts", 0, 0, "old", "4", batch=2),
                _record("word-counts", 0, 1, "both", "1", batch=2),
                _record("word-counts", 0, 2, "both", "2", batch=11),
                _record("word-counts", 0, 3, "late", "1", batch=12),
            ]
        },
        "word-counts-v2": {
            0: [_record("word-counts-v2", 0, 0, "both", {"count": 2, "first_seen_ms": None})]
        },
    }
    pair = OutputPair("output_topic", "word-counts", "word-counts-v2")
    [diff] = diff_outputs(
        [pair],
        topics.__getitem__,
        old_topology=t1,
        new_topology=t2,
        old_app="word-count",
        new_app="word-count-v2",
        rules={"output_topic": _wc_rule()},
        batch_floor=10,
    )
    assert (diff.equal, diff.expected_different, diff.unexpected) == (0, 1, 1), diff
    assert "'late'" in diff.examples[0] and diff.old_keys == 3 and diff.new_keys == 1


def test_the_pairs_both_specs_name() -> None:
    for old_name, new_name, expected in (
        ("word_count", "word_count_v2", [("output_topic", "word-counts", "word-counts-v2")]),
        (
            "patient_monitoring",
            "patient_monitoring_v2",
            [
                ("heart_rate_topic", "heart-rate", "heart-rate-v2"),
                ("alerts_topic", "patient-alerts", "patient-alerts-v2"),
            ],
        ),
    ):
        old, new = load_app_spec(spark_app_spec(old_name)), load_app_spec(spark_app_spec(new_name))
        pairs, notes = output_pairs(old, new, old.build_topology(), new.build_topology(), "a", "b")
        assert [(p.name, p.old_topic, p.new_topic) for p in pairs] == expected
        assert notes == []
    assert pairs[0].store == "heart-rate" and pairs[1].store is None


def test_a_declared_output_that_names_no_topic_is_an_error(tmp_path) -> None:
    spec = tmp_path / "v2.yaml"
    raw = load_app_spec(spark_app_spec("word_count_v2")).model_dump(by_alias=True)
    raw["outputs"] = {"nope": raw["outputs"]["output_topic"]}
    spec.write_text(yaml.safe_dump(raw))
    new = load_app_spec(spec)
    old = load_app_spec(spark_app_spec("word_count"))
    with pytest.raises(ConfigError, match=r"outputs\.nope .*'nope' names no output topic"):
        output_pairs(old, new, old.build_topology(), new.build_topology(), "a", "b")


def test_the_spec_checks_an_outputs_compare_file(tmp_path) -> None:
    spec = tmp_path / "app.yaml"
    spec.write_text(
        "application_id: x\ntopology: statekeeper.processing.topology:Topology\n"
        "outputs:\n  out: {compare: missing.py:expected, frm: 1}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_app_spec(spec)
    assert "outputs.out.frm" in str(caught.value) and "from" in str(caught.value)
    spec.write_text(
        "application_id: x\ntopology: statekeeper.processing.topology:Topology\n"
        "outputs:\n  out: {compare: missing.py:expected, from: out_topic}\n"
    )
    with pytest.raises(ConfigError, match=r"outputs\.out\.compare: no file .*missing\.py"):
        load_app_spec(spec)
