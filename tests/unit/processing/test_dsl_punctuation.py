"""Processor API: stores, forward(to=...), stream time and punctuations across restarts."""

from __future__ import annotations

import pytest

from statekeeper.processing.dsl import StreamsBuilder
from statekeeper.processing.errors import TopologyError
from statekeeper.processing.processor import Processor, PunctuationType, Record
from statekeeper.stores import Stores

from .harness import records


class Tracker(Processor):
    """Counts per key in a store; punctuations report what they see."""

    def init(self, context):
        super().init(context)
        self.counts = context.get_state_store("seen")
        self.stream = context.schedule(100, PunctuationType.STREAM_TIME, self._on_stream)
        context.schedule(1_000, PunctuationType.WALL_CLOCK_TIME, self._on_wall)

    def process(self, record):
        ctx = self.context
        self.counts.put(record.key, (self.counts.get(record.key) or 0) + 1)
        info = f"{record.key}:st={ctx.stream_time}:wall={ctx.wall_clock_time}:off={ctx.offset}"
        ctx.forward(record.with_value(info), to="log")
        if record.value == "stop":
            self.stream.cancel()

    def _on_stream(self, timestamp):
        total = sum(n for _, n in self.counts.all())
        self.context.forward(Record("stream", f"{timestamp}:{total}", timestamp), to="ticks")

    def _on_wall(self, timestamp):
        self.context.forward(Record("wall", str(timestamp), timestamp), to="ticks")


def _topology():
    b = StreamsBuilder()
    b.add_state_store(Stores.persistent("seen").with_serdes("str", "int"))
    stream = b.stream("in", key_serde="str", value_serde="str").process(Tracker, stores=["seen"])
    stream.to("log-topic", key_serde="str", value_serde="str", name="log")
    stream.to("ticks-topic", key_serde="str", value_serde="str", name="ticks")
    return b.build()


def test_punctuations_and_stream_time_continue_after_a_restart(harness):
    h = harness(_topology())
    r1 = h.run(records("in", [("a", "", 50), ("b", "", 120), ("a", "", 90), ("c", "", 350)]),
               batch_time_ms=10_000)  # fmt: skip
    assert r1.stream_time == 350
    h.run([], batch_time_ms=10_500)
    h.restart()
    r3 = h.run(records("in", [("a", "", 420)], start_offset=4), batch_time_ms=12_345)
    h.run([], batch_time_ms=13_000)
    assert r3.stream_time == 420
    ticks = [s.value.decode() for s in h.emitter.to("ticks-topic")]
    assert ticks == [
        "50:1",  # first stream-time punctuation: as soon as there is data
        "120:2",  # due at 100
        "350:4",  # due at 200; 300 is skipped (fires once however far time jumps)
        "420:5",  # due at 400, after the restart
        "12345",  # wall clock: first due one interval after the batch it was created in
        "13000",
    ]
    logs = [s.value.decode() for s in h.emitter.to("log-topic")]
    assert logs == [
        "a:st=-1:wall=10000:off=0",  # stream time is the max before this record
        "b:st=50:wall=10000:off=1",
        "a:st=120:wall=10000:off=2",
        "c:st=120:wall=10000:off=3",
        "a:st=350:wall=12345:off=4",  # persisted across the restart
    ]
    assert h.contents("seen") == {"a": 3, "b": 1, "c": 1}
    assert h.contents("sk-task-state-0") == {
        "stream-time": 420,
        "punctuation|KSTREAM-PROCESSOR-0000000001#0": 500,
        "punctuation|KSTREAM-PROCESSOR-0000000001#1": 14_000,
    }


def test_cancelled_punctuation_stops_and_is_forgotten(harness):
    h = harness(_topology())
    h.run(records("in", [("a", "", 50), ("a", "stop", 60), ("a", "", 500)]))
    ticks = [s.value.decode() for s in h.emitter.to("ticks-topic")]
    assert ticks == ["50:1"]
    assert "punctuation|KSTREAM-PROCESSOR-0000000001#0" not in h.contents("sk-task-state-0")


def test_stores_must_be_connected(harness):
    class Sneaky(Processor):
        def init(self, context):
            super().init(context)
            context.get_state_store("other")

        def process(self, record):
            pass

    b = StreamsBuilder()
    b.add_state_store(Stores.in_memory("other"))
    b.stream("in").process(Sneaky)
    b.stream("in2").process(Sneaky, stores=["other"])
    with pytest.raises(TopologyError, match="not connected"):
        harness(b.build())


def test_forward_to_an_unknown_child_fails(harness):
    class Lost(Processor):
        def process(self, record):
            self.context.forward(record, to="nowhere")

    b = StreamsBuilder(processing_errors="fail")
    b.stream("in", key_serde="str", value_serde="str").process(Lost).to("out", name="out")
    h = harness(b.build())
    with pytest.raises(TopologyError, match="no child 'nowhere'"):
        h.run(records("in", [("a", "x", 1)]))


def test_unconnected_and_unknown_stores_are_rejected_at_build():
    b = StreamsBuilder()
    b.add_state_store(Stores.in_memory("orphan"))
    b.stream("in").to("out")
    with pytest.raises(TopologyError, match="not connected"):
        b.build()
    b = StreamsBuilder()
    b.stream("in").process(Tracker, stores=["missing"])
    with pytest.raises(TopologyError, match="not defined"):
        b.build()
