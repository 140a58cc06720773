"""Dead-letter routing: undecodable records, keyless records, processing errors."""

from __future__ import annotations

import pytest

from statekeeper.errors import StatekeeperError
from statekeeper.kafka.model import KafkaRecord
from statekeeper.processing.dsl import StreamsBuilder
from statekeeper.processing.errors import InvalidRecordError

from .harness import records


def _validate(key, value):
    if value.get("bad"):
        raise InvalidRecordError("bad flag set")


def _topology(processing_errors="dlq"):
    b = StreamsBuilder(processing_errors=processing_errors)
    (
        b.stream("in", key_serde="str", value_serde="json")
        .peek(_validate)
        .map_values(lambda v: 100 // v["n"])
        .to("out", value_serde="json")
    )
    return b.build()


def test_bad_records_go_to_the_dlq_with_headers_and_processing_continues(harness, vectorize):
    h = harness(_topology(), vectorize=vectorize)
    batch = records("in", [("a", {"n": 5}, 10)])
    batch.append(KafkaRecord("in", 0, 1, 11, b"k", b"{not json", (("trace", b"t"),)))
    batch.append(KafkaRecord("in", 0, 2, 12, b"\xff", b'{"n": 1}'))
    batch += records("in", [("b", {"n": 0}, 13), ("c", {"bad": 1}, 14), ("d", {"n": 4}, 15)],
                     start_offset=3)  # fmt: skip
    result = h.run(batch)
    assert h.emitter.kv("out") == [("a", b"20"), ("d", b"25")]
    dlq = h.emitter.to("app-dlq")
    # Record at a time: DLQ records in input order; vectorised: op by op (still determined
    # by the input). Compare in input order.
    dlq.sort(key=lambda d: d.header["sk.source"])
    assert [(d.key, d.value, d.timestamp_ms) for d in dlq] == [
        (b"k", b"{not json", 11),
        (b"\xff", b'{"n": 1}', 12),
        (b"b", b'{"n": 0}', 13),
        (b"c", b'{"bad": 1}', 14),
    ]
    assert [d.header["sk.error.type"] for d in dlq] == [
        b"deserialization", b"deserialization", b"processing", b"invalid-record",
    ]  # fmt: skip
    assert dlq[2].header["sk.error.message"] == (
        b"ZeroDivisionError: integer division or modulo by zero"
    )
    assert dlq[3].header["sk.error.message"] == b"InvalidRecordError: bad flag set"
    assert [d.header["sk.source"] for d in dlq] == [b"in:0:1", b"in:0:2", b"in:0:3", b"in:0:4"]
    assert dlq[0].header["trace"] == b"t"  # original headers are kept
    for d in dlq:
        assert d.header["sk.app"] == b"app" and d.header["sk.task"] == b"0_0"
    seqs = [int(s.header["sk.seq"]) for s in h.emitter.sent]
    assert sorted(seqs) == list(range(len(h.emitter.sent)))
    assert (result.records_processed, result.records_dlq, result.records_output) == (2, 4, 2)
    assert result.stream_time == 15


def test_processing_errors_can_fail_the_batch_instead(harness, vectorize):
    h = harness(_topology("fail"), vectorize=vectorize)
    with pytest.raises(ZeroDivisionError):
        h.run(records("in", [("b", {"n": 0}, 13)]))


def test_undecodable_records_go_to_the_dlq_even_in_fail_mode(harness, vectorize):
    h = harness(_topology("fail"), vectorize=vectorize)
    h.run([KafkaRecord("in", 0, 0, 1, b"k", b"{not json")])
    assert len(h.emitter.to("app-dlq")) == 1


def test_infrastructure_errors_are_not_dead_lettered(harness):
    def broken(key, value):
        raise StatekeeperError("store closed")

    b = StreamsBuilder()
    b.stream("in", key_serde="str", value_serde="str").peek(broken).to("out")
    h = harness(b.build())
    with pytest.raises(StatekeeperError):
        h.run(records("in", [("a", "x", 1)]))


def test_failing_rows_do_not_rerun_the_rest_of_the_batch(harness, vectorize):
    """A user function runs once per record, failures or not (side effects are not
    repeated), and a map that does not return a pair dead-letters only that record."""
    calls = []

    def pair(key, value):
        calls.append(value)
        if value == "boom":
            raise ValueError("boom")
        return (key, value) if value != "triple" else (key, value, 3)

    b = StreamsBuilder()
    (
        b.stream("in", key_serde="str", value_serde="str")
        .flat_map(lambda k, v: [(k, x) for x in v.split(",")])
        .map(pair)
        .to("out", value_serde="str")
    )
    h = harness(b.build(), vectorize=vectorize)
    result = h.run(records("in", [("a", "x,boom", 1), ("b", "triple", 2), ("c", "y,z", 3)]))
    assert calls == ["x", "boom", "triple", "y", "z"]
    assert h.emitter.kv("out") == [("a", b"x"), ("c", b"y"), ("c", b"z")]
    dlq = sorted(h.emitter.to("app-dlq"), key=lambda d: d.header["sk.source"])
    assert [d.header["sk.source"] for d in dlq] == [b"in:0:0", b"in:0:1"]
    assert result.records_dlq == 2
