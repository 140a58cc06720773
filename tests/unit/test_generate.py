"""Generators: deterministic by seed, exact malformed/late shares, every DLQ rule covered."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from spark_apps.patient_monitoring.generator import (
    LATE_BEYOND_GRACE,
    LATE_WITHIN_GRACE,
    patient_events,
)
from spark_apps.patient_monitoring.generator import MALFORMED_KINDS as PATIENT_MALFORMED
from spark_apps.patient_monitoring.reference import DLQ_REASONS, parse_event
from spark_apps.patient_monitoring.reference import recompute as recompute_patients
from spark_apps.word_count.generator import MALFORMED_KINDS as LINE_MALFORMED
from spark_apps.word_count.generator import word_count_lines
from spark_apps.word_count.reference import recompute as recompute_word_count
from spark_apps.word_count.reference import words
from spark_apps.word_count.vocabulary import VOCABULARY, sentence, zipf_word
from statekeeper.generate import (
    Partitioner,
    murmur2,
    partition_for_key,
    place_records,
    summarize,
)

# Its module-scoped fixtures run once: the whole module goes to one xdist worker.
pytestmark = pytest.mark.xdist_group("generate")

START = 1_700_000_000_000


# --- partitioning -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Kafka's UtilsTest.testMurmur2 vectors
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        ("abc", 479470107),
    ],
)
def test_murmur2_matches_java(text: str, expected: int) -> None:
    assert murmur2(text.encode()) == expected


def test_partition_for_key_is_positive_murmur2_modulo() -> None:
    assert partition_for_key(b"21", 4) == (-973932308 & 0x7FFFFFFF) % 4
    assert {partition_for_key(f"p{i:04d}".encode(), 4) for i in range(50)} == {0, 1, 2, 3}
    with pytest.raises(ValueError):
        partition_for_key(b"x", 0)


def test_partitioner_round_robins_null_keys_and_hashes_others() -> None:
    partitioner = Partitioner(3)
    assert [partitioner(None) for _ in range(5)] == [0, 1, 2, 0, 1]
    assert partitioner(b"foobar") == partition_for_key(b"foobar", 3)


# --- vocabulary -----------------------------------------------------------------------------


def test_vocabulary_is_zipf_like() -> None:
    import random

    rng = random.Random(0)
    counts = Counter(zipf_word(rng) for _ in range(50_000))
    assert len(VOCABULARY) > 400
    assert counts.most_common(1)[0][0] == "the"
    top10 = {word for word, _ in counts.most_common(10)}
    assert top10 <= set(VOCABULARY[:20])
    # rank 1 vs rank 10: roughly 10^1.07 / shifts -> several times more frequent
    assert counts[VOCABULARY[0]] > 3 * counts[VOCABULARY[9]]
    assert len(counts) > 300  # the long tail shows up


def test_sentence_looks_like_a_line() -> None:
    import random

    line = sentence(random.Random(3))
    assert line[0].isupper() and line[-1] in ".!?"
    assert 3 <= len(line.split()) <= 16


# --- word_count -----------------------------------------------------------------------------


def test_word_count_lines_are_deterministic_by_seed() -> None:
    a = list(word_count_lines(2_000, seed=7, start_ms=START))
    b = list(word_count_lines(2_000, seed=7, start_ms=START))
    c = list(word_count_lines(2_000, seed=8, start_ms=START))
    assert a == b
    assert a != c
    assert len(a) == 2_000


def test_word_count_malformed_share_and_kinds() -> None:
    lines = list(word_count_lines(5_000, seed=2, malformed_share=0.02, start_ms=START))
    malformed = [r for r in lines if r.malformed]
    assert len(malformed) == 100
    assert Counter(r.malformed for r in malformed) == {k: 50 for k in LINE_MALFORMED}
    for record in malformed:
        if record.malformed == "null_value":
            assert record.value is None
        else:
            with pytest.raises(UnicodeDecodeError):
                record.value.decode("utf-8")  # type: ignore[union-attr]
    for record in lines:
        if not record.malformed:
            record.value.decode("utf-8")  # type: ignore[union-attr]


def test_word_count_keys_timestamps_and_words() -> None:
    lines = list(
        word_count_lines(3_000, seed=4, keyed_share=0.3, malformed_share=0.0, start_ms=START)
    )
    keyed = [r for r in lines if r.key is not None]
    assert 0.25 < len(keyed) / len(lines) < 0.35
    assert all(re.fullmatch(rb"source-\d\d", r.key) for r in keyed)  # type: ignore[arg-type]
    stamps = [r.timestamp_ms for r in lines]
    assert stamps == sorted(stamps) and stamps[0] >= START
    result = recompute_word_count(place_records(lines, "lines", 4))
    assert result.counts["the"] == max(result.counts.values())
    assert result.dlq == []
    assert sum(result.counts.values()) == sum(
        len(words(r.value.decode()))
        for r in lines  # type: ignore[union-attr]
    )


def test_word_count_recompute_dead_letters_exactly_the_malformed() -> None:
    lines = list(word_count_lines(4_000, seed=5, malformed_share=0.01, start_ms=START))
    result = recompute_word_count(place_records(lines, "lines", 4))
    partitioner, next_offset, flagged = Partitioner(4), Counter[int](), set()
    for record in lines:
        partition = partitioner(record.key)
        if record.malformed:
            flagged.add(("lines", partition, next_offset[partition]))
        next_offset[partition] += 1
    assert set(result.dlq) == flagged
    assert len(result.dlq) == 40
    assert set(result.dlq_reasons.values()) == set(LINE_MALFORMED)


def test_word_count_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        list(word_count_lines(10, malformed_share=1.5))
    with pytest.raises(ValueError):
        list(word_count_lines(-1))


# --- patient_monitoring ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def events() -> list:  # type: ignore[type-arg]
    return patient_events(
        30, 30, seed=11, start_ms=START, malformed_share=0.01, late_share=0.02, checkout_share=0.4
    )


def test_patient_events_are_deterministic_by_seed(events: list) -> None:  # type: ignore[type-arg]
    again = patient_events(
        30, 30, seed=11, start_ms=START, malformed_share=0.01, late_share=0.02, checkout_share=0.4
    )
    assert again == events
    other = patient_events(
        30, 30, seed=12, start_ms=START, malformed_share=0.01, late_share=0.02, checkout_share=0.4
    )
    assert other != events


def test_patient_malformed_share_covers_every_kind(events: list) -> None:  # type: ignore[type-arg]
    malformed = [r for r in events if r.malformed]
    valid = len(events) - len(malformed)
    assert len(malformed) == round(valid * 0.01 / 0.99)
    kinds = Counter(r.malformed for r in malformed)
    assert set(kinds) == set(PATIENT_MALFORMED)
    assert max(kinds.values()) - min(kinds.values()) <= 1


def test_patient_late_share_is_exact_and_split(events: list) -> None:  # type: ignore[type-arg]
    valid = [r for r in events if not r.malformed]
    eligible = [r for r in valid if b'"checkout"' not in r.value]  # type: ignore[operator]
    late = [r for r in valid if r.late]
    assert len(late) == round(len(eligible) * 0.02)
    by_kind = Counter(r.late for r in late)
    assert abs(by_kind[LATE_WITHIN_GRACE] - by_kind[LATE_BEYOND_GRACE]) <= 1
    # a late record arrives after records with later event times
    newest = 0
    behind = {LATE_WITHIN_GRACE: [], LATE_BEYOND_GRACE: []}  # type: dict[str, list[int]]
    for record in valid:
        if record.late:
            behind[record.late].append(newest - record.timestamp_ms)
        newest = max(newest, record.timestamp_ms)
    assert all(0 < lag <= 4_000 for lag in behind[LATE_WITHIN_GRACE])
    assert max(behind[LATE_BEYOND_GRACE]) > 60_000
    assert all(lag <= 180_000 for lag in behind[LATE_BEYOND_GRACE])


def test_patient_events_are_realistic(events: list) -> None:  # type: ignore[type-arg]
    valid = [r for r in events if not r.malformed]
    bodies = [json.loads(r.value) for r in valid]  # type: ignore[arg-type]
    assert all(re.fullmatch(rb"p\d{4}", r.key) for r in valid)  # type: ignore[arg-type]
    assert all(b["ts"] == r.timestamp_ms for b, r in zip(bodies, valid, strict=True))
    assert all(START <= r.timestamp_ms < START + 30 * 60_000 for r in valid)
    types = Counter(b["type"] for b in bodies)
    assert types["pulse"] > 50 * types["temperature"] > 0
    assert types["checkout"] >= 5
    temps = [b["temp_f"] for b in bodies if b["type"] == "temperature"]
    assert any(t > 100.4 for t in temps) and any(t < 99.0 for t in temps)
    # some patients continue after their checkout (re-admission)
    checked_out: dict[bytes, int] = {}
    readmitted = set()
    for r, b in zip(valid, bodies, strict=True):
        if b["type"] == "checkout":
            checked_out[r.key] = r.timestamp_ms  # type: ignore[index]
        elif r.key in checked_out and r.timestamp_ms > checked_out[r.key] + 60_000:
            readmitted.add(r.key)
    assert readmitted


def test_patient_events_exercise_every_dlq_rule_late_drops_and_alerts(
    events: list,  # type: ignore[type-arg]
) -> None:
    placed = place_records(events, "patient-events", 4)
    result = recompute_patients(placed)
    assert set(result.dlq_reasons.values()) == set(DLQ_REASONS)
    assert len(result.dlq) == sum(1 for r in events if r.malformed)
    beyond = sum(1 for r in events if r.late == LATE_BEYOND_GRACE)
    assert 0 < result.late_dropped <= beyond  # within-grace records are never dropped
    assert any(v and v["bpm"] > 100 for _, v in result.heart_rate_outputs)  # tachycardia
    assert result.alerts
    assert any(v is None for _, v in result.heart_rate_outputs)  # checkout tombstones


def test_every_malformed_record_breaks_a_rule(events: list) -> None:  # type: ignore[type-arg]
    from spark_apps.patient_monitoring.reference import Malformed

    for record in events:
        if record.malformed:
            with pytest.raises(Malformed):
                parse_event(record.key, record.value)
        else:
            parse_event(record.key, record.value)


def test_patient_events_reject_bad_arguments() -> None:
    with pytest.raises(ValueError):
        patient_events(0, 10)
    with pytest.raises(ValueError):
        patient_events(3, 1, late_share=-0.1)
    with pytest.raises(ValueError):
        patient_events(3, 1, malformed_share=1.0)


# --- placement and summary ----------------------------------------------------------------


def test_place_records_like_a_java_producer(events: list) -> None:  # type: ignore[type-arg]
    placed = place_records(events, "patient-events", 4)
    assert sum(len(v) for v in placed.values()) == len(events)
    for partition, records in placed.items():
        assert [r.offset for r in records] == list(range(len(records)))
        for r in records:
            assert r.topic == "patient-events" and r.partition == partition
            if r.key is not None:
                assert partition_for_key(r.key, 4) == partition


def test_summarize_counts(events: list) -> None:  # type: ignore[type-arg]
    summary = summarize(events, "patient-events", 4)
    assert summary.records == len(events)
    assert summary.malformed == sum(1 for r in events if r.malformed)
    assert summary.late == sum(1 for r in events if r.late)
    assert summary.records_per_topic == {"patient-events": len(events)}
    placed = place_records(events, "patient-events", 4)
    assert summary.records_per_partition == {p: len(v) for p, v in placed.items()}
    assert summary.span_ms == max(r.timestamp_ms for r in events) - min(
        r.timestamp_ms for r in events
    )
    as_dict = summary.as_dict()
    assert json.loads(json.dumps(as_dict)) == as_dict
    assert "malformed" in summary.describe()
