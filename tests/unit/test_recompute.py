"""Reference models on small hand-made inputs with hand-computed expected results."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spark_apps.patient_monitoring.reference import (
    DLQ_BAD_TEMPERATURE,
    DLQ_MISSING_TYPE,
    DLQ_NOT_JSON_OBJECT,
    DLQ_NULL_KEY,
    DLQ_UNKNOWN_TYPE,
    latest_heart_rate,
)
from spark_apps.patient_monitoring.reference import recompute as recompute_patients
from spark_apps.word_count.reference import recompute as recompute_word_count
from spark_apps.word_count.reference import words
from statekeeper.kafka.model import KafkaRecord

T = "patient-events"
W = 60_000  # window size
CLOSE = 65_000  # window end + grace, from the window start


class Log:
    """Builds one partition's records with consecutive offsets."""

    def __init__(self, partition: int = 0, topic: str = T) -> None:
        self.topic, self.partition = topic, partition
        self.records: list[KafkaRecord] = []

    def add(self, key: str | bytes | None, value: Any, ts: int) -> int:
        if isinstance(key, str):
            key = key.encode()
        if isinstance(value, dict):
            value = json.dumps(value).encode()
        elif isinstance(value, str):
            value = value.encode()
        offset = len(self.records)
        self.records.append(KafkaRecord(self.topic, self.partition, offset, ts, key, value))
        return offset

    def pulse(self, patient: str, ts: int, n: int = 1) -> None:
        for _ in range(n):
            self.add(patient, {"type": "pulse"}, ts)

    def temp(self, patient: str, ts: int, temp_f: float) -> int:
        return self.add(patient, {"type": "temperature", "temp_f": temp_f}, ts)

    def checkout(self, patient: str, ts: int) -> int:
        return self.add(patient, {"type": "checkout"}, ts)


# --- word_count -----------------------------------------------------------------------------


def test_words_split_like_the_app() -> None:
    assert words("Don't STOP, believin'! 42x -- naïve") == [
        "don't",
        "stop",
        "believin'",
        "42x",
        "na",
        "ve",
    ]
    assert words("") == [] and words("?!") == []


def test_word_count_counts_and_dead_letters() -> None:
    log = Log(topic="lines")
    log.add(None, "The cat and the hat.", 1)
    log.add(b"source-1", None, 2)
    log.add(None, b"the \xff cat", 3)
    log.add(b"source-2", "", 4)
    log.add(None, "THE end", 5)
    other = Log(partition=1, topic="lines")
    other.add(None, "cat's cradle", 1)
    result = recompute_word_count({0: log.records, 1: other.records})
    assert result.counts == {
        "the": 3,
        "cat": 1,
        "and": 1,
        "hat": 1,
        "end": 1,
        "cat's": 1,
        "cradle": 1,
    }
    assert result.dlq == [("lines", 0, 1), ("lines", 0, 2)]
    assert result.dlq_reasons == {("lines", 0, 1): "null_value", ("lines", 0, 2): "invalid_utf8"}
    assert result.records == 6 and result.words == 9
    flat = recompute_word_count([*other.records, *log.records])
    assert flat.counts == result.counts and flat.dlq == result.dlq


def test_records_out_of_offset_order_are_rejected() -> None:
    log = Log(topic="lines")
    log.add(None, "a", 1)
    log.add(None, "b", 2)
    with pytest.raises(ValueError, match="offset order"):
        recompute_word_count(list(reversed(log.records)))


# --- patient_monitoring: lateness and suppression -------------------------------------------


@pytest.mark.parametrize(
    ("stream_time", "dropped"),
    [(CLOSE - 1, 0), (CLOSE, 1), (CLOSE + 1, 1)],
)
def test_late_drop_at_the_exact_grace_boundary(stream_time: int, dropped: int) -> None:
    log = Log()
    log.pulse("p1", 10_000)
    log.pulse("p2", stream_time)  # advances stream time
    log.pulse("p1", W - 1)  # window [0, 60000): late iff 60000 + 5000 <= stream time
    result = recompute_patients({0: log.records})
    assert result.late_dropped == dropped
    assert result.pulse_windows[("p1", 0)] == 2 - dropped


def test_late_check_uses_stream_time_before_the_record() -> None:
    log = Log()
    log.pulse("p1", 0)
    log.pulse("p1", CLOSE)  # a pulse of window 60000 whose ts closes window 0: not late itself
    result = recompute_patients({0: log.records})
    assert result.late_dropped == 0
    assert result.pulse_windows == {("p1", 0): 1, ("p1", W): 1}


def test_suppression_emits_each_window_once_when_it_closes() -> None:
    log = Log()
    log.pulse("p1", 1_000, n=3)
    log.pulse("p2", 2_000, n=2)
    log.pulse("p1", CLOSE - 1)  # window 60000; window 0 not closed yet
    assert recompute_patients({0: log.records}).heart_rate_outputs == []
    log.pulse("p1", CLOSE)  # closes window 0 for both patients
    log.pulse("p1", CLOSE + 10_000)
    log.temp("p2", 2 * W + 4_000, 98.6)  # no window closes (window 60000 closes at 125000)
    result = recompute_patients({0: log.records})
    assert result.heart_rate_outputs == [
        ("p1", {"bpm": 3, "window_start": 0}),
        ("p2", {"bpm": 2, "window_start": 0}),
    ]
    assert result.heart_rate == {
        "p1": {"bpm": 3, "window_start": 0},
        "p2": {"bpm": 2, "window_start": 0},
    }
    log.temp("p2", 2 * W + 5_000, 98.6)  # closes window 60000 of p1 (3 pulses)
    result = recompute_patients({0: log.records})
    assert result.heart_rate_outputs[-1] == ("p1", {"bpm": 3, "window_start": W})
    assert len(result.heart_rate_outputs) == 3
    assert result.pulse_windows == {("p1", 0): 3, ("p2", 0): 2, ("p1", W): 3}


def test_windows_closing_together_are_emitted_in_window_then_patient_order() -> None:
    log = Log()
    log.pulse("p2", 0)
    log.pulse("p1", 0)
    log.pulse("p1", W)
    log.pulse("p3", 2 * W + CLOSE)  # closes windows 0 and 60000 at once
    result = recompute_patients({0: log.records})
    assert [(p, v["window_start"]) for p, v in result.heart_rate_outputs] == [  # type: ignore[index]
        ("p1", 0),
        ("p2", 0),
        ("p1", W),
    ]
    assert result.heart_rate["p1"] == {"bpm": 1, "window_start": W}


def test_stream_time_is_per_partition() -> None:
    p0, p1 = Log(0), Log(1)
    p0.pulse("p1", 0)
    p1.pulse("p2", 10 * W)  # far ahead, but in another task
    p0.pulse("p1", 1_000)
    result = recompute_patients({0: p0.records, 1: p1.records})
    assert result.late_dropped == 0
    assert result.pulse_windows[("p1", 0)] == 2
    assert result.heart_rate_outputs == []
    assert result.stream_time == {(T, 0): 1_000, (T, 1): 10 * W}


def test_malformed_records_do_not_advance_stream_time() -> None:
    log = Log()
    log.pulse("p1", 0)
    log.add("p1", {"type": "bogus"}, 10 * W)
    log.add(None, {"type": "pulse"}, 10 * W)
    log.pulse("p1", 1_000)
    result = recompute_patients({0: log.records})
    assert result.late_dropped == 0 and result.pulse_windows == {("p1", 0): 2}
    assert result.stream_time == {(T, 0): 1_000}


# --- patient_monitoring: the join ---------------------------------------------------------


def _tachycardic(log: Log, patient: str, bpm: int, start: int = 0) -> None:
    log.pulse(patient, start + 100, n=bpm)


@pytest.mark.parametrize(
    ("bpm", "temp_f", "alert"),
    [(101, 100.5, True), (100, 105.0, False), (101, 100.4, False), (140, 100.41, True)],
)
def test_alert_thresholds_are_strict(bpm: int, temp_f: float, alert: bool) -> None:
    log = Log()
    _tachycardic(log, "p1", bpm)
    log.pulse("p9", CLOSE)  # closes window 0
    log.temp("p1", CLOSE + 1_000, temp_f)
    result = recompute_patients({0: log.records})
    expected = {
        "patient_id": "p1",
        "bpm": bpm,
        "window_start": 0,
        "temp_f": temp_f,
        "ts": CLOSE + 1_000,
    }
    assert result.alerts == ([expected] if alert else [])


def test_temperature_sees_the_table_before_its_own_emissions() -> None:
    log = Log()
    _tachycardic(log, "p1", 120)
    log.temp("p1", CLOSE, 102.0)  # closes window 0, but looks the table up first
    log.temp("p1", CLOSE + 1, 102.5)
    result = recompute_patients({0: log.records})
    assert result.alerts == [
        {"patient_id": "p1", "bpm": 120, "window_start": 0, "temp_f": 102.5, "ts": CLOSE + 1}
    ]


def test_no_heart_rate_no_alert_and_latest_window_wins() -> None:
    log = Log()
    log.temp("p1", 100, 104.0)  # no heart-rate entry yet
    _tachycardic(log, "p1", 130)
    log.pulse("p1", W + 100, n=70)  # a calmer next window
    log.pulse("p9", W + CLOSE)  # closes both windows
    log.temp("p1", W + CLOSE + 1, 104.0)
    result = recompute_patients({0: log.records})
    assert result.alerts == []  # latest window: 70 bpm
    assert result.heart_rate["p1"] == {"bpm": 70, "window_start": W}


# --- patient_monitoring: checkout ---------------------------------------------------------


def test_checkout_deletes_state_and_pending_windows() -> None:
    log = Log()
    _tachycardic(log, "p1", 110)  # window 0
    log.pulse("p2", CLOSE)  # emits p1 window 0
    log.pulse("p1", W + 1_000, n=5)  # window 60000, pending
    log.checkout("p1", W + 2_000)
    log.temp("p1", W + 3_000, 103.0)  # no entry any more: no alert
    log.pulse("p2", 3 * W)  # would have closed p1's window 60000
    result = recompute_patients({0: log.records})
    assert result.heart_rate_outputs == [
        ("p1", {"bpm": 110, "window_start": 0}),
        ("p1", None),  # the checkout's tombstone
        ("p2", {"bpm": 1, "window_start": W}),
    ]
    assert "p1" not in result.heart_rate
    assert result.alerts == []
    assert result.pulse_windows == {("p2", W): 1, ("p2", 3 * W): 1}
    assert latest_heart_rate(result.heart_rate_outputs) == result.heart_rate


def test_readmission_after_checkout_starts_from_scratch() -> None:
    log = Log()
    log.pulse("p1", 1_000, n=4)
    log.checkout("p1", 2_000)
    log.pulse("p1", 3_000, n=2)  # same window, after the checkout: counts from 1
    log.pulse("p9", CLOSE)
    result = recompute_patients({0: log.records})
    assert result.pulse_windows[("p1", 0)] == 2
    assert result.heart_rate["p1"] == {"bpm": 2, "window_start": 0}
    assert result.heart_rate_outputs[0] == ("p1", None)


def test_checkout_without_state_still_outputs_a_tombstone() -> None:
    log = Log()
    log.checkout("p7", 0)
    result = recompute_patients({0: log.records})
    assert result.heart_rate_outputs == [("p7", None)]
    assert result.heart_rate == {} and result.pulse_windows == {}


def test_checkout_in_the_record_that_closes_a_window_wins() -> None:
    log = Log()
    log.pulse("p1", 0, n=3)
    log.checkout("p1", CLOSE)  # deletes first, then stream time closes window 0: nothing left
    result = recompute_patients({0: log.records})
    assert result.heart_rate_outputs == [("p1", None)]


# --- patient_monitoring: DLQ and retention --------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        (None, {"type": "pulse"}, DLQ_NULL_KEY),
        ("p1", None, DLQ_NOT_JSON_OBJECT),
        ("p1", b"pulse;p1", DLQ_NOT_JSON_OBJECT),
        ("p1", b'{"type":"pulse"', DLQ_NOT_JSON_OBJECT),
        ("p1", b'{"type":"pulse","x":"\xff"}', DLQ_NOT_JSON_OBJECT),
        ("p1", b'["pulse"]', DLQ_NOT_JSON_OBJECT),
        ("p1", b"null", DLQ_NOT_JSON_OBJECT),
        ("p1", b"", DLQ_NOT_JSON_OBJECT),
        ("p1", {"patient_id": "p1"}, DLQ_MISSING_TYPE),
        ("p1", {"type": "spo2"}, DLQ_UNKNOWN_TYPE),
        ("p1", {"type": "Pulse"}, DLQ_UNKNOWN_TYPE),
        ("p1", {"type": None}, DLQ_UNKNOWN_TYPE),
        ("p1", {"type": "temperature"}, DLQ_BAD_TEMPERATURE),
        ("p1", {"type": "temperature", "temp_f": "101.2"}, DLQ_BAD_TEMPERATURE),
        ("p1", {"type": "temperature", "temp_f": None}, DLQ_BAD_TEMPERATURE),
        ("p1", {"type": "temperature", "temp_f": True}, DLQ_BAD_TEMPERATURE),
    ],
)
def test_dlq_rules(key: str | None, value: Any, reason: str) -> None:
    log = Log()
    log.pulse("p1", 0)
    log.add(key, value, 1_000)
    result = recompute_patients({0: log.records})
    assert result.dlq == [(T, 0, 1)]
    assert result.dlq_reasons == {(T, 0, 1): reason}
    assert result.pulse_windows == {("p1", 0): 1}


def test_integer_temperature_is_a_number() -> None:
    log = Log()
    _tachycardic(log, "p1", 101)
    log.pulse("p9", CLOSE)
    log.temp("p1", CLOSE + 1, 101)
    result = recompute_patients({0: log.records})
    assert result.dlq == [] and result.alerts[0]["temp_f"] == 101


def test_retention_hides_old_windows() -> None:
    log = Log()
    for minute in range(10):
        log.pulse("p1", minute * W)
    result = recompute_patients({0: log.records}, retention_ms=3 * W)
    # newest window starts at 9 min; visible: start >= 9 min - 3 min + 1 ms -> 7, 8, 9
    assert sorted(start // W for _, start in result.pulse_windows) == [7, 8, 9]
    assert result.windows_expired == 7
    assert len(recompute_patients({0: log.records}).pulse_windows) == 10  # 6 h default
