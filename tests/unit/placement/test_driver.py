"""The driver's side of placement (ExecutorPlacement): runs tagged with their executor and
epoch, shares per executor, the pass rule, and what executors' reports feed into placement
(query endpoints, caught-up standbys, live executors). Pure logic, no Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.app.executor_reports import ExecutorReports
from statekeeper.kafka.model import OffsetRange
from statekeeper.placement.driver import ExecutorPlacement, avoid_next_pass
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.task_id import TaskId
from statekeeper.worker.task_run import TaskRun
from statekeeper.worker.task_runner import ExecutorReport


@pytest.fixture
def placement(tmp_path: Path) -> ExecutorPlacement:
    return _wired(tmp_path, standbys=1)[0]


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


def _report(executor: str, **report) -> ExecutorReport:
    return ExecutorReport(executor, f"host-{executor}", report)


def _wired(tmp_path: Path, standbys: int = 0, **kw) -> tuple[ExecutorPlacement, ExecutorReports]:
    """Placement and reports wired as the app wires them."""
    settings = _settings(tmp_path, standbys)
    placement = ExecutorPlacement(settings.application_id, settings.num_standby_replicas, **kw)
    reports = ExecutorReports(
        settings.acceptable_recovery_lag,
        on_endpoint=placement.registry.note_endpoint,
        live_executors=placement.live_executors,
    )
    return placement, reports


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
    placement = _wired(tmp_path, standbys=2)[0]
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


def test_a_pass_moves_unrun_runs_away_at_once_from_a_lost_executor_later_otherwise(placement):
    placed, _ = placement.place(_runs(4), ["1", "2"])
    where = {r.task_id: r.executor for r in placed}
    # First pass: nothing ran; executor "1" is gone, "2" is alive.
    first = avoid_next_pass(placed, ran=[], still_alive={"2"}, attempt=0)
    assert first == {t: "1" for t, e in where.items() if e == "1"}
    # From the second pass on, every unrun run moves away, alive executor or not.
    ran = [next(t for t, e in where.items() if e == "2")]
    later = avoid_next_pass(placed, ran=ran, still_alive={"1", "2"}, attempt=1)
    assert later == {t: e for t, e in where.items() if t not in ran}


# -- what reports feed into placement -----------------------------------------------------


def test_query_endpoints_go_into_the_next_assignment(tmp_path):
    placement, reports = _wired(tmp_path, standbys=1)
    placement.place(_runs(2), ["1", "2"])
    reports.note_reports([_report("1", query={"host": "10.0.0.1", "port": 7001})])
    reports.note_reports([_report("2", query={"port": 7002})])  # the executor's host
    reports.note_reports([_report("2", query={"port": None})])  # no server: ignored
    _, assignment = placement.place(_runs(2), ["1", "2"])
    assert assignment.executors["1"].query_url == "http://10.0.0.1:7001"
    assert assignment.executors["2"].query_url == "http://host-2:7002"


def test_standby_lag_shows_only_live_executors(tmp_path):
    placement, reports = _wired(tmp_path, standbys=1)
    placement.place(_runs(2), ["1", "2"])
    lag = {"state": "running", "lag": 3, "applied_offsets": {"c-0": 7}, "updated": 1.0}
    reports.note_reports(
        [
            _report("1", standbys={"0_0": lag}),
            _report("2", standbys={"0_0": {**lag, "lag": 0}, "0_1": lag}),
        ]
    )
    assert reports.standby_lag() == {
        "0_0": {"1": {**lag, "error": None}, "2": {**lag, "lag": 0, "error": None}},
        "0_1": {"2": {**lag, "error": None}},
    }
    placement.place(_runs(2), ["2", "3"])  # executor 1 is gone: its last report is dropped
    assert set(reports.standby_lag()["0_0"]) == {"2"}
    status = reports.status()
    assert set(status["executor_reports"]) == {"2"}
    assert "standbys" not in status["executor_reports"]["2"]
    assert status["standby_lag"] == reports.standby_lag()


def test_stateless_tasks_balance_anywhere_stateful_ones_only_onto_caught_up_copies(tmp_path):
    placement, reports = _wired(tmp_path, standbys=1, has_state=lambda sub: sub == 1)
    runs = [TaskRun(t, int(t[0]), int(t[2]), (), 1, 1) for t in ("0_0", "0_1", "1_0", "1_1")]
    placement.place(runs, ["1"])
    for _ in range(3):
        _, assignment = placement.place(runs, ["1", "2"], caught_up=reports.caught_up_standbys())
    # No standby report yet: the stateless tasks even out among themselves; the stateful
    # ones stay until a caught-up copy of one is on the idle executor.
    placed = {t: p.active for t, p in assignment.tasks.items()}
    assert sorted([placed["0_0"], placed["0_1"]]) == ["1", "2"]
    assert placed["1_0"] == placed["1_1"] == "1"
    report = {"standbys": {"1_0": {"state": "running", "lag": {"c": 0}}}}
    reports.note_reports([ExecutorReport("2", "h", report)])
    _, assignment = placement.place(runs, ["1", "2"], caught_up=reports.caught_up_standbys())
    placed = {t: p.active for t, p in assignment.tasks.items()}
    assert placed["1_0"] == "2" and placed["1_1"] == "1"
