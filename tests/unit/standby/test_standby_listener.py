"""The standby event recorder and its replay (pure logic: no broker)."""

from __future__ import annotations

import json

import pytest

from statekeeper.standby.listener import (
    BaseStandbyUpdateListener,
    CompositeStandbyUpdateListener,
    RecordingStandbyListener,
    SuspendReason,
    replay_event,
)

TP = ("app-kv-changelog", 3)


class _Calls(BaseStandbyUpdateListener):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_update_start(self, *args) -> None:  # type: ignore[no-untyped-def]
        self.calls.append(("start", *args))

    def on_batch_loaded(self, *args) -> None:  # type: ignore[no-untyped-def]
        self.calls.append(("batch", *args))

    def on_update_suspended(self, *args) -> None:  # type: ignore[no-untyped-def]
        self.calls.append(("suspended", *args))


def _drive(listener) -> None:  # type: ignore[no-untyped-def]
    listener.on_update_start(TP, "kv", 0)
    listener.on_batch_loaded(TP, "kv", 41, 40, 42)
    listener.on_update_suspended(TP, "kv", 41, 50, SuspendReason.PROMOTED)


def test_recorded_events_replay_to_the_same_calls_in_order() -> None:
    recorder, direct = RecordingStandbyListener(), _Calls()
    _drive(recorder)
    _drive(direct)
    events = json.loads(json.dumps(recorder.events()))  # they travel as JSON
    assert [e["seq"] for e in events] == [0, 1, 2]
    assert {e["stream"] for e in events} == {recorder.stream}
    replayed = _Calls()
    for event in events:
        replay_event(event, replayed)
    assert replayed.calls == direct.calls
    assert replayed.calls[-1][-1] is SuspendReason.PROMOTED
    assert recorder.events(after_seq=1) == events[2:]


def test_the_recorder_is_bounded_and_drains() -> None:
    recorder = RecordingStandbyListener(max_events=2)
    _drive(recorder)
    # The batch load goes first: starts and suspensions are rare and must reach the driver.
    assert [e["event"] for e in recorder.events()] == ["update_start", "update_suspended"]
    assert recorder.dropped == 1
    assert len(recorder.drain_events()) == 2 and recorder.events() == []
    recorder.on_update_start(TP, "kv", 5)
    assert recorder.events()[0]["seq"] == 3  # seq keeps growing across drains


def test_a_failing_listener_does_not_stop_the_others() -> None:
    class Broken(BaseStandbyUpdateListener):
        def on_update_start(self, *args) -> None:  # type: ignore[no-untyped-def]
            raise RuntimeError("boom")

    calls = _Calls()
    CompositeStandbyUpdateListener([Broken(), calls]).on_update_start(TP, "kv", 0)
    assert calls.calls == [("start", TP, "kv", 0)]


def test_unknown_events_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown standby event 'nope'"):
        replay_event({"event": "nope", "topic": "t", "partition": 0, "store": "s"}, _Calls())


def test_reports_keep_rare_events_beside_many_batch_loads() -> None:
    from statekeeper.standby.executor_standbys import report_events

    recorder = RecordingStandbyListener(max_events=50)
    recorder.on_update_start(TP, "kv", 0)
    for n in range(300):
        recorder.on_batch_loaded(TP, "kv", n, 1, 300)
    recorder.on_update_suspended(TP, "kv", 299, 300, SuspendReason.PROMOTED)
    kept = recorder.events()
    assert len(kept) == 50 and kept[0]["event"] == "update_start"
    report = report_events(kept, 10)
    assert [e["event"] for e in report][0] == "update_start" and len(report) == 10
    assert report[-1]["event"] == "update_suspended"
    assert [e["seq"] for e in report] == sorted(e["seq"] for e in report)
