"""The executors' reports as the driver keeps them (ExecutorReports): restores by cause,
stale copies, standby events replayed once to the app's listeners, standby lag. Pure logic,
no Spark."""

from __future__ import annotations

import logging

import pytest

from statekeeper.app.executor_reports import ExecutorReports
from statekeeper.standby.listener import (
    BaseStandbyUpdateListener,
    RecordingStandbyListener,
    SuspendReason,
)
from statekeeper.worker.task_run import TaskRunResult
from statekeeper.worker.task_runner import ExecutorReport


@pytest.fixture
def reports() -> ExecutorReports:
    return ExecutorReports(0, on_endpoint=lambda _e: None, live_executors=lambda: None)


def _result(task_id: str, executor: str, restored: list[dict], **kw) -> TaskRunResult:
    return TaskRunResult(task_id, 0, committed=True, executor_id=executor, restored=restored, **kw)


# -- results: restores by cause --------------------------------------------------------------


def test_restores_are_counted_by_cause_and_source(reports):
    snapshot = [{"store": "counts", "source": "snapshot", "records": 5}]
    changelog = [{"store": "counts", "source": "changelog", "records": 7}]
    reports.note_results([_result("0_0", "1", snapshot)])  # first open this run
    reports.note_results([_result("0_0", "1", [], warm=True)])  # warm: no restore
    reports.note_results([_result("0_0", "1", changelog)])  # cold again, same executor
    reports.note_results([_result("0_0", "2", changelog)])  # on another executor
    reports.note_results([_result("0_1", "", changelog)])  # "" is the driver
    reports.note_results([_result("0_1", "driver", [])])  # nothing to restore
    assert dict(reports.restores) == {
        ("start", "snapshot"): 1,
        ("reopened", "changelog"): 1,
        ("moved", "changelog"): 1,
        ("start", "changelog"): 1,
    }
    assert dict(reports.restored_records) == {"start": 12, "reopened": 7, "moved": 7}
    assert reports.status()["restores"] == [
        {"cause": "moved", "source": "changelog", "count": 1},
        {"cause": "reopened", "source": "changelog", "count": 1},
        {"cause": "start", "source": "changelog", "count": 1},
        {"cause": "start", "source": "snapshot", "count": 1},
    ]


def test_a_warm_run_on_another_executor_counts_as_its_last_executor(reports):
    changelog = [{"store": "counts", "source": "changelog", "records": 1}]
    reports.note_results([_result("0_0", "1", changelog)])
    reports.note_results([_result("0_0", "2", [], warm=True)])
    reports.note_results([_result("0_0", "2", changelog)])
    assert reports.restores[("reopened", "changelog")] == 1
    assert reports.restores[("moved", "changelog")] == 0


def test_stale_copies_are_counted(reports):
    from statekeeper.worker.task_runner import StaleCopyClosed

    reports.note_stale(
        [
            StaleCopyClosed("0_0", "1", "task moved to executor 2"),
            StaleCopyClosed("0_2", "1", "placement epoch 1 is older than 2"),
        ]
    )
    assert reports.stale_copies == 2
    status = reports.status()
    assert status["stale_copies_closed"] == 2
    assert [s["task"] for s in status["recent_stale_copies"]] == ["0_0", "0_2"]


# -- reports: endpoints, standby events and lag ------------------------------------------------


def _events(*calls: tuple[str, tuple]) -> RecordingStandbyListener:
    recorder = RecordingStandbyListener()
    for method, args in calls:
        getattr(recorder, method)(*args)
    return recorder


def _report(
    executor: str, recorder: RecordingStandbyListener | None = None, **extra
) -> ExecutorReport:
    standbys = dict(extra.pop("standbys", {}))
    if recorder is not None:
        standbys["events"] = recorder.events()
    return ExecutorReport(executor, f"host-{executor}", {"standbys": standbys, **extra})


class Collecting(BaseStandbyUpdateListener):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_update_start(self, topic_partition, store_name, starting_offset):
        self.calls.append(("start", topic_partition, store_name, starting_offset))

    def on_batch_loaded(self, topic_partition, store_name, end, size, current_end):
        self.calls.append(("loaded", topic_partition, store_name, end, size, current_end))

    def on_update_suspended(self, topic_partition, store_name, offset, current_end, reason):
        self.calls.append(("suspended", topic_partition, store_name, offset, reason))


class Failing(BaseStandbyUpdateListener):
    def on_update_start(self, topic_partition, store_name, starting_offset):
        raise RuntimeError("listener bug")

    def on_batch_loaded(self, *args):
        raise RuntimeError("listener bug")


def test_standby_events_are_replayed_once_each_in_order(reports):
    collected = Collecting()
    reports.add_standby_listener(collected)
    tp = ("changelog", 0)
    recorder = _events(("on_update_start", (tp, "counts", 5)))
    # Every Spark task on an executor sends the same report: one replay.
    reports.note_reports([_report("2", recorder), _report("2", recorder)])
    recorder.on_batch_loaded(tp, "counts", 9, 4, 12)
    recorder.on_update_suspended(tp, "counts", 9, 12, SuspendReason.PROMOTED)
    reports.note_reports([_report("2", recorder)])  # holds the first event again
    reports.note_reports([_report("2", recorder)])
    assert collected.calls == [
        ("start", tp, "counts", 5),
        ("loaded", tp, "counts", 9, 4, 12),
        ("suspended", tp, "counts", 9, SuspendReason.PROMOTED),
    ]
    assert dict(reports.standby_event_counts) == {
        "update_start": 1,
        "batch_loaded": 1,
        "update_suspended": 1,
    }
    assert [e["executor"] for e in reports.standby_events] == ["2", "2"]  # start, suspend
    assert [e["executor"] for e in reports.standby_loads] == ["2"]


def test_events_of_two_executors_are_told_apart_by_stream(reports):
    collected = Collecting()
    reports.add_standby_listener(collected)
    a = _events(("on_update_start", (("c", 0), "counts", 1)))
    b = _events(("on_update_start", (("c", 1), "counts", 2)))  # seq 0 too, another stream
    reports.note_reports([_report("1", a), _report("2", b)])
    assert [c[1] for c in collected.calls] == [("c", 0), ("c", 1)]


def test_a_failing_listener_does_not_stop_the_others(reports, caplog):
    collected = Collecting()
    reports.add_standby_listener(Failing())
    reports.add_standby_listener(collected)
    recorder = _events(
        ("on_update_start", (("c", 0), "counts", 0)),
        ("on_batch_loaded", (("c", 0), "counts", 3, 3, 3)),
    )
    with caplog.at_level(logging.ERROR, logger="statekeeper.app"):
        reports.note_reports([_report("1", recorder)])
    assert [c[0] for c in collected.calls] == ["start", "loaded"]
    assert sum("standby listener" in r.getMessage() for r in caplog.records) == 2


def test_status_keeps_rare_standby_events_beside_many_batch_loads(reports):
    tp = ("c", 0)
    calls = [("on_update_start", (tp, "counts", 0))]
    calls += [("on_batch_loaded", (tp, "counts", n, 1, n)) for n in range(100)]
    calls += [("on_update_suspended", (tp, "counts", 99, 99, SuspendReason.MIGRATED))]
    reports.note_reports([_report("1", _events(*calls))])
    recent = reports.status()["standby_events"]
    kinds = [e["event"] for e in recent]
    assert kinds[0] == "update_start" and kinds[-1] == "update_suspended"
    assert kinds.count("batch_loaded") == 20
    assert reports.status()["standby_event_counts"]["batch_loaded"] == 100
