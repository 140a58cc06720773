"""The two contract apps built with the DSL, on hand-made inputs (and, when the reference
models are installed, on generated inputs checked against them)."""

from __future__ import annotations

import pytest

from spark_apps.patient_monitoring import topology as patient_monitoring
from spark_apps.word_count import topology as word_count
from statekeeper.kafka.model import KafkaRecord

from .harness import as_json, records

# -- word_count --------------------------------------------------------------------------------


def test_word_count(harness, vectorize):
    topology = word_count.build_topology()
    assert topology.internal_topics("word-count") == ["word-count-words-repartition"]
    up = harness(topology, name="up", subtopology=0, vectorize=vectorize)
    down = harness(topology, name="down", subtopology=1, vectorize=vectorize)
    lines = [
        KafkaRecord("lines", 0, 0, 10, None, b"Hello, hello WORLD!"),
        KafkaRecord("lines", 0, 1, 11, b"k", None),
        KafkaRecord("lines", 0, 2, 12, None, b"caf\xff"),
        KafkaRecord("lines", 0, 3, 13, None, b"It's 2 o'clock -- hello"),
    ]
    result = up.run(lines)
    assert result.records_dlq == 2
    assert sorted(s.header["sk.error.type"] for s in up.emitter.to("app-dlq")) == [
        b"deserialization",
        b"invalid-record",
    ]
    repartitioned = up.emitter.to("app-words-repartition")
    assert [s.key for s in repartitioned] == [
        b"hello", b"hello", b"world", b"it's", b"2", b"o'clock", b"hello",
    ]  # fmt: skip
    down.run([s.as_record(0, i) for i, s in enumerate(repartitioned)])
    expected = {"hello": 3, "world": 1, "it's": 1, "2": 1, "o'clock": 1}
    assert down.contents("word-counts") == expected
    latest = dict(down.emitter.kv("word-counts"))
    assert latest == {w: str(n).encode() for w, n in expected.items()}


# -- patient_monitoring ----------------------------------------------------------------------


def _event(key, value, ts):
    return key, value, ts


def _patient_input():
    items = [_event("p1", {"type": "pulse"}, 100 * i + 100) for i in range(101)]
    items += [_event("p2", {"type": "pulse"}, ts) for ts in (5_000, 6_000, 7_000)]
    items += [
        _event("p1", {"type": "temperature", "temp_f": 102.5}, 20_000),  # no heart rate yet
        _event("p2", {"type": "pulse"}, 61_000),
        _event("p1", {"type": "pulse"}, 59_000),  # window 0 open until stream time 65 s
        _event("p3", {"type": "pulse"}, 66_000),  # closes window 0: p1=102, p2=3
        _event("p1", {"type": "pulse"}, 30_000),  # late
        _event("p1", {"type": "temperature", "temp_f": 101.0}, 67_000),  # alert
        _event("p2", {"type": "temperature", "temp_f": 103.0}, 67_500),  # bpm 3: none
        _event("p1", {"type": "temperature", "temp_f": 100.4}, 68_000),  # not > 100.4
        _event(None, {"type": "pulse"}, 69_000),  # DLQ: no key
        _event("p1", {"type": "sneeze"}, 999_999),  # DLQ, does not move stream time
        _event("p1", {"type": "temperature", "temp_f": "high"}, 69_500),  # DLQ
        _event("p1", ["pulse"], 69_600),  # DLQ: not an object
        _event("p2", {"type": "checkout"}, 70_000),  # drops p2's state and pending window
        _event("p3", {"type": "pulse"}, 126_000),  # closes [60 s, 120 s): only p3's
    ]
    batch = records("patient-events", items)
    batch.insert(105, KafkaRecord("patient-events", 0, 10_000, 15_000, b"p1", b"{nope"))
    return [KafkaRecord(r.topic, 0, i, r.timestamp_ms, r.key, r.value) for i, r in enumerate(batch)]


@pytest.mark.parametrize("splits", [[], [104, 108], [110, 115, 117]], ids=str)
def test_patient_monitoring(harness, splits):
    topology = patient_monitoring.build_topology()
    assert len(topology.subtopologies) == 1
    h = harness(topology)
    batch = _patient_input()
    results = []
    for part_start, part_end in zip([0, *splits], [*splits, len(batch)], strict=True):
        results.append(h.run(batch[part_start:part_end], batch_time_ms=1))
        h.restart()
    assert h.contents("pulse-counts") == {
        ("p1", 0): 102,
        ("p3", 60_000): 1,
        ("p3", 120_000): 1,
    }
    assert h.contents("heart-rate") == {
        "p1": {"bpm": 102, "window_start": 0},
        "p3": {"bpm": 1, "window_start": 60_000},
    }
    assert h.emitter.kv("heart-rate", as_json) == [
        ("p1", {"bpm": 102, "window_start": 0}),
        ("p2", {"bpm": 3, "window_start": 0}),
        ("p2", None),  # checkout tombstone
        ("p3", {"bpm": 1, "window_start": 60_000}),
    ]
    assert h.emitter.kv("patient-alerts", as_json) == [
        ("p1", {"patient_id": "p1", "bpm": 102, "window_start": 0, "temp_f": 101.0, "ts": 67_000})
    ]
    assert sum(r.records_late_dropped for r in results) == 1
    assert sum(r.records_dlq for r in results) == 5
    assert results[-1].stream_time == 126_000
    assert len(h.task.stores["heart-rate-suppress-store"]) == 1  # p3's open [120 s, 180 s)


def test_checkout_without_heart_rate_still_outputs_a_tombstone(harness):
    h = harness(patient_monitoring.build_topology())
    h.run(records("patient-events", [("p9", {"type": "checkout"}, 5)]))
    assert h.emitter.kv("heart-rate") == [("p9", None)]


# -- cross-check with the reference models (when present) ------------------------------------


def _partitions(generated, topic, partitions):
    from statekeeper.generate.records import place_records

    return place_records(generated, topic, partitions)


def _run_partitioned(harness, topology, placed, *, subtopology=0, batch_size=700, name="t"):
    tasks = {}
    for partition, recs in placed.items():
        h = harness(topology, name=f"{name}{partition}", subtopology=subtopology,
                    partition=partition)  # fmt: skip
        for i in range(0, len(recs), batch_size):
            h.run(recs[i : i + batch_size], batch_time_ms=1_000 + i)
            if i % (3 * batch_size) == 0:
                h.restart()
        tasks[partition] = h
    return tasks


def test_patient_monitoring_matches_the_reference_model(harness):
    generate = pytest.importorskip("spark_apps.patient_monitoring.generator")
    reference = pytest.importorskip("spark_apps.patient_monitoring.reference")
    generated = generate.patient_events(patients=12, minutes=20, seed=7, malformed_share=0.02)
    placed = _partitions(generated, "patient-events", 3)
    expected = reference.recompute(placed)
    tasks = _run_partitioned(harness, patient_monitoring.build_topology(), placed)

    windows, table, outputs, alerts, dlq = {}, {}, [], [], []
    for partition in sorted(tasks):
        h = tasks[partition]
        windows.update(h.contents("pulse-counts"))
        table.update(h.contents("heart-rate"))
        outputs += h.emitter.kv("heart-rate", as_json)
        alerts += [v for _, v in h.emitter.kv("patient-alerts", as_json)]
        dlq += [
            tuple(s.header["sk.source"].decode().rsplit(":", 2)) for s in h.emitter.to("app-dlq")
        ]
    assert windows == expected.pulse_windows
    assert table == expected.heart_rate
    assert outputs == expected.heart_rate_outputs
    assert alerts == expected.alerts
    assert [(t, int(p), int(o)) for t, p, o in dlq] == expected.dlq
    assert expected.alerts and expected.dlq and expected.late_dropped  # a meaningful input


def test_word_count_matches_the_reference_model(harness, vectorize):
    generate = pytest.importorskip("spark_apps.word_count.generator")
    reference = pytest.importorskip("spark_apps.word_count.reference")
    generated = generate.word_count_lines(2_000, seed=3)
    placed = _partitions(generated, "lines", 2)
    expected = reference.recompute(placed)
    topology = word_count.build_topology()
    up = _run_partitioned(harness, topology, placed, name="up")
    repartitioned = [s for h in up.values() for s in h.emitter.to("app-words-repartition")]
    down = harness(topology, name="down", subtopology=1, vectorize=vectorize)
    down.run([s.as_record(0, i) for i, s in enumerate(repartitioned)])
    assert down.contents("word-counts") == expected.counts
    assert sum(len(h.emitter.to("app-dlq")) for h in up.values()) == len(expected.dlq)
