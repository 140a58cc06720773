"""The Spark batch recomputation agrees with the plain-Python reference models."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spark_apps.patient_monitoring import reference_spark as pm_spark
from spark_apps.patient_monitoring.generator import patient_events
from spark_apps.patient_monitoring.reference import DLQ_REASONS, PatientResult
from spark_apps.patient_monitoring.reference import recompute as recompute_patients
from spark_apps.word_count import reference_spark as wc_spark
from spark_apps.word_count.generator import word_count_lines
from spark_apps.word_count.reference import recompute as recompute_word_count
from statekeeper.generate import place_records
from statekeeper.kafka.model import KafkaRecord
from statekeeper.recompute.spark_frames import records_to_dataframe

# Its module-scoped fixtures run once: the whole module goes to one xdist worker.
pytestmark = pytest.mark.xdist_group("spark_recompute")

START = 1_700_000_000_000
T = "patient-events"
W, CLOSE = 60_000, 65_000

_FIELDS = (
    "pulse_windows",
    "heart_rate",
    "alerts",
    "heart_rate_outputs",
    "dlq",
    "dlq_reasons",
    "late_dropped",
    "records",
    "stream_time",
    "windows_expired",
)


def _assert_same(spark_result: PatientResult, python_result: PatientResult) -> None:
    for name in _FIELDS:
        assert getattr(spark_result, name) == getattr(python_result, name), name


def test_dataframe_has_the_jvm_kafka_source_schema(spark: Any) -> None:
    records = [KafkaRecord("t", 0, 0, START, b"k", b"v", (("h", b"1"),))]
    df = records_to_dataframe(spark, records)
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    from pyspark.sql import functions as F

    row = df.select(F.unix_millis("timestamp"), "headers").first()
    assert row[0] == START
    assert [(h["key"], h["value"]) for h in row[1]] == [("h", b"1")]


def test_word_count_agrees_with_python(spark: Any) -> None:
    placed = place_records(
        word_count_lines(20_000, seed=3, malformed_share=0.02, start_ms=START), "lines", 4
    )
    expected = recompute_word_count(placed)
    result = wc_spark.recompute(records_to_dataframe(spark, placed))
    assert result.counts == expected.counts
    assert result.dlq == expected.dlq and len(result.dlq) == 400
    assert result.dlq_reasons == expected.dlq_reasons
    assert result.words == expected.words and result.records == expected.records


@pytest.fixture(scope="module")
def generated() -> dict[int, list[KafkaRecord]]:
    records = patient_events(
        30,
        25,
        seed=21,
        start_ms=START,
        malformed_share=0.01,
        late_share=0.03,
        checkout_share=0.5,
    )
    return place_records(records, T, 4)


def test_patient_monitoring_agrees_with_python(
    spark: Any, generated: dict[int, list[KafkaRecord]]
) -> None:
    expected = recompute_patients(generated)
    # the data exercises every branch
    assert set(expected.dlq_reasons.values()) == set(DLQ_REASONS)
    assert expected.late_dropped > 0 and expected.alerts
    assert any(value is None for _, value in expected.heart_rate_outputs)
    _assert_same(pm_spark.recompute(records_to_dataframe(spark, generated)), expected)


def _scenarios() -> list[KafkaRecord]:
    """Hand-made edge cases, one partition each, patients unique per partition."""
    out: list[KafkaRecord] = []

    def log(partition: int, events: list[tuple[str | None, Any, int]]) -> None:
        for offset, (key, value, ts) in enumerate(events):
            if isinstance(value, dict):
                value = json.dumps(value).encode()
            k = None if key is None else f"{key}-{partition}".encode()
            out.append(KafkaRecord(T, partition, offset, ts, k, value))

    pulse, checkout = {"type": "pulse"}, {"type": "checkout"}

    def temp(t: float) -> dict[str, Any]:
        return {"type": "temperature", "temp_f": t}

    # 0: late exactly at the grace boundary, and one ms before it
    log(0, [("a", pulse, 0), ("b", pulse, CLOSE), ("a", pulse, W - 1), ("a", pulse, W + 1)])
    # 1: temperature that closes the window sees the table before its own emission
    log(1, [("a", pulse, 100)] * 120 + [("a", temp(102.0), CLOSE), ("a", temp(102.5), CLOSE + 1)])
    # 2: strict thresholds: 100 bpm never alerts; 100.4 never alerts
    log(
        2,
        [("a", pulse, 100)] * 100
        + [("b", pulse, 100)] * 101
        + [("z", pulse, CLOSE), ("a", temp(105.0), CLOSE + 1), ("b", temp(100.4), CLOSE + 2)]
        + [("b", temp(100.5), CLOSE + 3)],
    )
    # 3: checkout in the record that closes the window; re-admission in the same window
    log(
        3,
        [("a", pulse, 0)] * 3
        + [("a", checkout, 1_000), ("a", pulse, 2_000), ("b", pulse, 3_000)]
        + [("b", checkout, CLOSE), ("a", temp(101.0), CLOSE + 1)],
    )
    # 4: malformed records with huge timestamps do not advance stream time
    log(
        4,
        [("a", pulse, 0), ("a", {"type": "bogus"}, 10 * W), (None, pulse, 10 * W)]
        + [("a", b"[1]", 10 * W), ("a", {"type": "temperature"}, 10 * W), ("a", pulse, 1)],
    )
    # 5: windows of several patients closing together; checkout without state
    log(
        5,
        [("b", pulse, 0), ("a", pulse, 0), ("a", pulse, W), ("c", checkout, W)]
        + [("c", pulse, 2 * W + CLOSE)],
    )
    return out


def test_hand_made_edge_cases_agree(spark: Any) -> None:
    records = _scenarios()
    # a short retention also checks the store's retention rule (partition 5 spans 3 minutes)
    expected = recompute_patients(records, retention_ms=2 * W)
    assert expected.late_dropped == 1
    assert [a["temp_f"] for a in expected.alerts] == [102.5, 100.5]
    assert expected.windows_expired == 3
    df = records_to_dataframe(spark, records)
    _assert_same(pm_spark.recompute(df, retention_ms=2 * W), expected)
