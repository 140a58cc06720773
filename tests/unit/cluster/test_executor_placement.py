"""The driver's side of placement (ExecutorPlacement): runs tagged with their executor and
epoch, shares per executor, restores by cause, executors' reports (query endpoints, standby
events replayed once to the app's listeners, standby lag). Pure logic, no Spark."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from statekeeper.app.executor_placement import ExecutorPlacement
from statekeeper.kafka.model import OffsetRange
from statekeeper.settings import StatekeeperSettings
from statekeeper.standby.listener import (
    BaseStandbyUpdateListener,
    RecordingStandbyListener,
    SuspendReason,
)
from statekeeper.state.task_id import TaskId
from statekeeper.worker.task_run import TaskRun, TaskRunResult
from statekeeper.worker.task_runner import ExecutorReport


@pytest.fixture
def placement(tmp_path: Path) -> ExecutorPlacement:
    return ExecutorPlacement(_settings(tmp_path, standbys=1))


def _settings(tmp_path: Path, standbys: int = 0) -> StatekeeperSettings:
    return StatekeeperSettings(
        bootstrap_servers="127.0.0.1:1",
        application_id="placed",
        state_dir=tmp_path / "state",
        checkpoint_dir=tmp_path / "checkpoints",
        status_port=None,
        num_standby_replicas=standbys,
    )


def _run(task_id: str, records: int = 10, batch: int = 0) -> TaskRun:
    partition = TaskId.parse(task_id).partition
    return TaskRun(task_id, 0, partition, (OffsetRange("in", partition, 0, records),), batch, 0)


def _runs(n: int) -> list[TaskRun]:
    return [_run(f"0_{p}", records=10 * (p + 1)) for p in range(n)]


def _result(task_id: str, executor: str, restored: list[dict], **kw) -> TaskRunResult:
    return TaskRunResult(task_id, 0, committed=True, executor_id=executor, restored=restored, **kw)


# -- place, shares -------------------------------------------------------------------------


def test_place_tags_every_run_with_its_executor_and_epoch(placement):
    placed, assignment = placement.place(_runs(4), ["1", "2"])
    assert [r.task_id for r in placed] == [f"0_{p}" for p in range(4)]
    for run in placed:
        assert run.executor == assignment.active_of(run.task_id) in ("1", "2")
        assert run.epoch == assignment.epoch_of(run.task_id) == 1
    # Executor "1" is lost: its runs go to "2" (their standby there) under epoch 2.
    on_1 = {r.task_id for r in placed if r.executor == "1"}
    placed, _ = placement.place(_runs(4), ["2", "3"])
    for run in placed:
        if run.task_id in on_1:
            assert (run.executor, run.epoch) == ("2", 2)
        else:
            assert run.epoch == 1


def test_local_mode_places_everything_on_the_driver_at_epoch_1(tmp_path):
    placement = ExecutorPlacement(_settings(tmp_path, standbys=2))
    for batch in range(5):
        # From the second batch on, as if a pass found 0_0 not run (the app's third pass).
        avoid = {"0_0": "driver"} if batch else None
        placed, assignment = placement.place(_runs(4), ["driver"], avoid)
        assert {(r.executor, r.epoch) for r in placed} == {("driver", 1)}
        assert all(p.standbys == () for p in assignment.tasks.values())
    assert placement.status()["moves_total"] == 0


def test_shares_hold_runs_of_one_executor_one_share_per_core(placement):
    runs = _runs(8)
    placed, _ = placement.place(runs, ["1", "2"])
    shares = placement.shares(placed, ["1", "2"], parallelism=4)  # 2 cores each
    assert sorted(r.task_id for share in shares for r in share) == sorted(r.task_id for r in runs)
    for share in shares:
        assert share and len({r.executor for r in share}) == 1
    per_executor = {e: sum(1 for s in shares if s[0].executor == e) for e in ("1", "2")}
    assert per_executor == {"1": 2, "2": 2}


def test_shares_skip_an_executor_with_nothing_placed_there(placement):
    placed, _ = placement.place(_runs(2), ["1", "2"])
    shares = placement.shares(placed, ["1", "2", "3"], parallelism=6)
    assert {s[0].executor for s in shares} == {"1", "2"}
    assert len(shares) == 2  # one run each: no empty shares


def test_shares_with_fewer_cores_than_executors_give_each_executor_one_share(placement):
    placed, _ = placement.place(_runs(6), ["1", "2", "3"])
    shares = placement.shares(placed, ["1", "2", "3"], parallelism=2)
    assert sorted(s[0].executor for s in shares) == ["1", "2", "3"]


def test_a_run_placed_on_a_dead_executor_is_in_no_share(placement):
    placed, _ = placement.place(_runs(4), ["1", "2"])
    shares = placement.shares(placed, ["2"], parallelism=4)
    assert all(r.executor == "2" for share in shares for r in share)


# -- results: restores by cause --------------------------------------------------------------


def test_restores_are_counted_by_cause_and_source(placement):
    snapshot = [{"store": "counts", "source": "snapshot", "records": 5}]
    changelog = [{"store": "counts", "source": "changelog", "records": 7}]
    placement.note_results([_result("0_0", "1", snapshot)])  # first open this run
    placement.note_results([_result("0_0", "1", [], warm=True)])  # warm: no restore
    placement.note_results([_result("0_0", "1", changelog)])  # cold again, same executor
    placement.note_results([_result("0_0", "2", changelog)])  # on another executor
    placement.note_results([_result("0_1", "", changelog)])  # "" is the driver
    placement.note_results([_result("0_1", "driver", [])])  # nothing to restore
    assert dict(placement.restores) == {
        ("start", "snapshot"): 1,
        ("reopened", "changelog"): 1,
        ("moved", "changelog"): 1,
        ("start", "changelog"): 1,
    }
    assert dict(placement.restored_records) == {"start": 12, "reopened": 7, "moved": 7}
    assert placement.status()["restores"] == [
        {"cause": "moved", "source": "changelog", "count": 1},
        {"cause": "reopened", "source": "changelog", "count": 1},
        {"cause": "start", "source": "changelog", "count": 1},
        {"cause": "start", "source": "snapshot", "count": 1},
    ]


def test_a_warm_run_on_another_executor_counts_as_its_last_executor(placement):
    changelog = [{"store": "counts", "source": "changelog", "records": 1}]
    placement.note_results([_result("0_0", "1", changelog)])
    placement.note_results([_result("0_0", "2", [], warm=True)])
    placement.note_results([_result("0_0", "2", changelog)])
    assert placement.restores[("reopened", "changelog")] == 1
    assert placement.restores[("moved", "changelog")] == 0


def test_stale_copies_are_counted(placement):
    from statekeeper.worker.task_runner import StaleCopyClosed

    placement.note_stale(
        [
            StaleCopyClosed("0_0", "1", "task moved to executor 2"),
            StaleCopyClosed("0_2", "1", "placement epoch 1 is older than 2"),
        ]
    )
    assert placement.stale_copies == 2
    status = placement.status()
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


def test_query_endpoints_go_into_the_next_assignment(placement):
    placement.place(_runs(2), ["1", "2"])
    placement.note_reports([_report("1", query={"host": "10.0.0.1", "port": 7001})])
    placement.note_reports([_report("2", query={"port": 7002})])  # the executor's host
    placement.note_reports([_report("2", query={"port": None})])  # no server: ignored
    _, assignment = placement.place(_runs(2), ["1", "2"])
    assert assignment.executors["1"].query_url == "http://10.0.0.1:7001"
    assert assignment.executors["2"].query_url == "http://host-2:7002"


def test_standby_events_are_replayed_once_each_in_order(placement):
    collected = Collecting()
    placement.add_standby_listener(collected)
    tp = ("changelog", 0)
    recorder = _events(("on_update_start", (tp, "counts", 5)))
    # Every Spark task on an executor sends the same report: one replay.
    placement.note_reports([_report("2", recorder), _report("2", recorder)])
    recorder.on_batch_loaded(tp, "counts", 9, 4, 12)
    recorder.on_update_suspended(tp, "counts", 9, 12, SuspendReason.PROMOTED)
    placement.note_reports([_report("2", recorder)])  # holds the first event again
    placement.note_reports([_report("2", recorder)])
    assert collected.calls == [
        ("start", tp, "counts", 5),
        ("loaded", tp, "counts", 9, 4, 12),
        ("suspended", tp, "counts", 9, SuspendReason.PROMOTED),
    ]
    assert dict(placement.standby_event_counts) == {
        "update_start": 1,
        "batch_loaded": 1,
        "update_suspended": 1,
    }
    assert [e["executor"] for e in placement.standby_events] == ["2", "2"]  # start, suspend
    assert [e["executor"] for e in placement.standby_loads] == ["2"]


def test_events_of_two_executors_are_told_apart_by_stream(placement):
    collected = Collecting()
    placement.add_standby_listener(collected)
    a = _events(("on_update_start", (("c", 0), "counts", 1)))
    b = _events(("on_update_start", (("c", 1), "counts", 2)))  # seq 0 too, another stream
    placement.note_reports([_report("1", a), _report("2", b)])
    assert [c[1] for c in collected.calls] == [("c", 0), ("c", 1)]


def test_a_failing_listener_does_not_stop_the_others(placement, caplog):
    collected = Collecting()
    placement.add_standby_listener(Failing())
    placement.add_standby_listener(collected)
    recorder = _events(
        ("on_update_start", (("c", 0), "counts", 0)),
        ("on_batch_loaded", (("c", 0), "counts", 3, 3, 3)),
    )
    with caplog.at_level(logging.ERROR, logger="statekeeper.app"):
        placement.note_reports([_report("1", recorder)])
    assert [c[0] for c in collected.calls] == ["start", "loaded"]
    assert sum("standby listener" in r.getMessage() for r in caplog.records) == 2


def test_standby_lag_shows_only_live_executors(placement):
    placement.place(_runs(2), ["1", "2"])
    lag = {"state": "running", "lag": 3, "applied_offsets": {"c-0": 7}, "updated": 1.0}
    placement.note_reports(
        [
            _report("1", standbys={"0_0": lag}),
            _report("2", standbys={"0_0": {**lag, "lag": 0}, "0_1": lag}),
        ]
    )
    assert placement.standby_lag() == {
        "0_0": {"1": {**lag, "error": None}, "2": {**lag, "lag": 0, "error": None}},
        "0_1": {"2": {**lag, "error": None}},
    }
    placement.place(_runs(2), ["2", "3"])  # executor 1 is gone: its last report is dropped
    assert set(placement.standby_lag()["0_0"]) == {"2"}
    status = placement.status()
    assert set(status["executor_reports"]) == {"2"}
    assert "standbys" not in status["executor_reports"]["2"]
    assert status["standby_lag"] == placement.standby_lag()


def test_status_keeps_rare_standby_events_beside_many_batch_loads(placement):
    tp = ("c", 0)
    calls = [("on_update_start", (tp, "counts", 0))]
    calls += [("on_batch_loaded", (tp, "counts", n, 1, n)) for n in range(100)]
    calls += [("on_update_suspended", (tp, "counts", 99, 99, SuspendReason.MIGRATED))]
    placement.note_reports([_report("1", _events(*calls))])
    recent = placement.status()["standby_events"]
    kinds = [e["event"] for e in recent]
    assert kinds[0] == "update_start" and kinds[-1] == "update_suspended"
    assert kinds.count("batch_loaded") == 20
    assert placement.status()["standby_event_counts"]["batch_loaded"] == 100


def test_stateless_tasks_balance_anywhere_stateful_ones_only_onto_caught_up_copies():
    from statekeeper.settings import StatekeeperSettings
    from statekeeper.worker.task_run import TaskRun

    placement = ExecutorPlacement(
        StatekeeperSettings(application_id="app", num_standby_replicas=1),
        has_state=lambda sub: sub == 1,
    )
    runs = [TaskRun(t, int(t[0]), int(t[2]), (), 1, 1) for t in ("0_0", "0_1", "1_0", "1_1")]
    placement.place(runs, ["1"])
    for _ in range(3):
        _, assignment = placement.place(runs, ["1", "2"])
    # No standby report yet: the stateless tasks even out among themselves; the stateful
    # ones stay until a caught-up copy of one is on the idle executor.
    placed = {t: p.active for t, p in assignment.tasks.items()}
    assert sorted([placed["0_0"], placed["0_1"]]) == ["1", "2"]
    assert placed["1_0"] == placed["1_1"] == "1"
    report = {"standbys": {"1_0": {"state": "running", "lag": {"c": 0}}}}
    placement.note_reports([ExecutorReport("2", "h", report)])
    _, assignment = placement.place(runs, ["1", "2"])
    placed = {t: p.active for t, p in assignment.tasks.items()}
    assert placed["1_0"] == "2" and placed["1_1"] == "1"
