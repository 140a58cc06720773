"""Sticky task placement on the driver (TaskPlacementRegistry) and the Assignment it hands
to executors: pure logic, no Spark."""

from __future__ import annotations

import pytest

from statekeeper.placement.assignment import Assignment, ExecutorEndpoint, TaskPlacement
from statekeeper.placement.registry import TaskPlacementRegistry

TASKS = ["0_0", "0_1", "0_2", "0_3"]


def _placement(registry: TaskPlacementRegistry) -> dict[str, str | None]:
    assert registry.last is not None
    return {t: p.active for t, p in registry.last.tasks.items()}


def _epochs(registry: TaskPlacementRegistry) -> dict[str, int]:
    assert registry.last is not None
    return {t: p.epoch for t, p in registry.last.tasks.items()}


def test_first_placement_spreads_tasks_over_the_executors_at_epoch_1():
    registry = TaskPlacementRegistry("app")
    assignment = registry.plan(TASKS, ["1", "2"])
    per_executor = sorted(list(_placement(registry).values()).count(e) for e in ("1", "2"))
    assert per_executor == [2, 2]
    assert set(_epochs(registry).values()) == {1}
    assert assignment.version == 1
    assert registry.move_count == 0  # a first placement is not a move


def test_a_task_stays_on_its_executor_while_it_is_alive():
    registry = TaskPlacementRegistry("app")
    registry.plan(TASKS, ["1", "2"])
    first = _placement(registry)
    # More executors join, the order Spark lists them in changes: nothing moves.
    for alive in (["1", "2", "3"], ["3", "2", "1"], ["1", "2", "3", "4"]):
        registry.plan(TASKS, alive)
        assert _placement(registry) == first
        assert set(_epochs(registry).values()) == {1}
    assert registry.move_count == 0


def test_tasks_seen_before_stay_placed_when_a_batch_has_no_run_for_them():
    registry = TaskPlacementRegistry("app")
    registry.plan(TASKS, ["1", "2"])
    first = _placement(registry)
    assignment = registry.plan(["0_0"], ["1", "2"])
    assert set(assignment.tasks) == set(TASKS)
    assert _placement(registry) == first


def test_a_task_whose_executor_is_gone_goes_to_the_least_loaded_executor():
    registry = TaskPlacementRegistry("app")
    registry.plan(TASKS, ["1", "2"])
    lost = [t for t, e in _placement(registry).items() if e == "1"]
    kept = {t: e for t, e in _placement(registry).items() if e == "2"}
    registry.plan(TASKS, ["2", "3"])
    placement = _placement(registry)
    assert {t: placement[t] for t in kept} == kept  # the others do not move
    assert all(placement[t] == "3" for t in lost)  # "3" had nothing, "2" had two
    assert all(registry.epoch_of(t) == 2 for t in lost)
    assert all(registry.epoch_of(t) == 1 for t in kept)
    assert registry.move_count == len(lost)
    assert registry.moves_by_reason == {"executor lost": len(lost)}
    move = registry.moves[-1]
    assert (move.from_executor, move.to_executor, move.reason) == ("1", "3", "executor lost")


def test_a_task_whose_executor_is_gone_goes_to_its_standby_executor():
    registry = TaskPlacementRegistry("app", num_standby_replicas=1)
    registry.plan(["0_0"], ["1", "2", "3"])
    active = registry.active_of("0_0")
    (standby,) = registry.last.standbys_of("0_0")
    assert standby != active
    survivors = [e for e in ("1", "2", "3") if e != active]
    # The standby's executor is listed last and is the more loaded one: it wins anyway.
    other = next(e for e in survivors if e != standby)
    registry.plan(["0_0", "0_1", "0_2"], [other, standby])
    assert registry.active_of("0_0") == standby
    assert registry.epoch_of("0_0") == 2
    assert registry.moves[0].as_dict() | {"at": 0} == {
        "task": "0_0",
        "from": active,
        "to": standby,
        "reason": "to standby",
        "at": 0,
    }
    # Its new standby is on a live executor other than its new active one.
    assert registry.last.standbys_of("0_0") == (other,)


def test_avoid_moves_a_task_away_from_an_executor_that_did_not_run_it():
    registry = TaskPlacementRegistry("app")
    registry.plan(TASKS, ["1", "2"])
    stuck = next(t for t, e in _placement(registry).items() if e == "1")
    before = _placement(registry)
    registry.plan(TASKS, ["1", "2"], avoid={stuck: "1"})
    after = _placement(registry)
    assert after[stuck] == "2"
    assert {t: e for t, e in after.items() if t != stuck} == {
        t: e for t, e in before.items() if t != stuck
    }
    assert registry.epoch_of(stuck) == 2
    assert registry.moves_by_reason == {"not scheduled": 1}


def test_avoid_prefers_the_task_standby_executor():
    registry = TaskPlacementRegistry("app", num_standby_replicas=1)
    registry.plan(["0_0"], ["1", "2", "3"])
    active = registry.active_of("0_0")
    (standby,) = registry.last.standbys_of("0_0")
    registry.plan(["0_0"], ["1", "2", "3"], avoid={"0_0": active})
    assert registry.active_of("0_0") == standby
    assert registry.moves[-1].reason == "not scheduled (to standby)"


def test_a_task_avoided_on_an_executor_that_is_gone_moved_because_it_was_lost():
    # The app also puts a task in ``avoid`` when its executor vanished during the pass: the
    # move's reason is the lost executor (runtime.md; the failover test counts "to standby").
    registry = TaskPlacementRegistry("app", num_standby_replicas=1)
    registry.plan(["0_0", "0_1"], ["1", "2", "3"])
    active = registry.active_of("0_0")
    (standby,) = registry.last.standbys_of("0_0")
    survivors = [e for e in ("1", "2", "3") if e != active]
    registry.plan(["0_0", "0_1"], survivors, avoid={"0_0": active})
    assert registry.active_of("0_0") == standby
    assert registry.moves[-1].reason == "to standby"
    plain = TaskPlacementRegistry("app")
    plain.plan(["0_0"], ["1", "2"])
    gone = plain.active_of("0_0")
    plain.plan(["0_0"], [e for e in ("1", "2", "3") if e != gone], avoid={"0_0": gone})
    assert plain.moves[-1].reason == "executor lost"


def test_a_task_moved_away_by_avoid_stays_where_it_went_in_later_passes():
    # The app keeps its ``avoid`` map over a batch's passes and plans every task each pass:
    # a task moved away from "1" (and run on "2") must not move again.
    registry = TaskPlacementRegistry("app")
    registry.plan(["0_0", "0_1", "0_2"], ["1", "2", "3"])
    task = next(t for t, e in _placement(registry).items() if e == "1")
    registry.plan(["0_0", "0_1", "0_2"], ["1", "2", "3"], avoid={task: "1"})
    moved_to = registry.active_of(task)
    assert moved_to != "1"
    for _ in range(3):  # an empty executor joins meanwhile: still no reason to move
        registry.plan([], ["1", "2", "3", "4"], avoid={task: "1"})
        assert registry.active_of(task) == moved_to
        assert registry.epoch_of(task) == 2
    assert registry.move_count == 1


def test_avoid_with_a_single_executor_neither_moves_nor_raises_the_epoch():
    registry = TaskPlacementRegistry("app")
    registry.plan(["0_0"], ["1"])
    version = registry.last.version
    registry.plan(["0_0"], ["1"], avoid={"0_0": "1"})
    assert registry.active_of("0_0") == "1"
    assert registry.epoch_of("0_0") == 1
    assert registry.move_count == 0
    assert registry.last.version == version


def test_epochs_grow_only_on_moves_and_once_per_move():
    registry = TaskPlacementRegistry("app")
    registry.plan(["0_0"], ["1", "2"])
    home = registry.active_of("0_0")
    other = "2" if home == "1" else "1"
    for _ in range(5):
        registry.plan(["0_0"], ["1", "2"])
    assert registry.epoch_of("0_0") == 1
    registry.plan(["0_0"], [other])  # lost its executor
    assert registry.epoch_of("0_0") == 2
    registry.plan(["0_0"], [other, home])  # the old one is back: the task stays
    assert (registry.active_of("0_0"), registry.epoch_of("0_0")) == (other, 2)
    registry.plan(["0_0"], [home])
    assert (registry.active_of("0_0"), registry.epoch_of("0_0")) == (home, 3)
    assert registry.epoch_of("never-seen") == 0


def test_the_version_grows_on_changes_only():
    registry = TaskPlacementRegistry("app")
    v1 = registry.plan(TASKS, ["1", "2"]).version
    assert registry.plan(TASKS, ["1", "2"]).version == v1
    assert registry.plan(TASKS, ["2", "1"]).version == v1  # same set, other order
    assert registry.plan(TASKS[:1], ["1", "2"]).version == v1  # nothing new
    v2 = registry.plan(TASKS, ["1", "2", "3"]).version  # an executor joined
    assert v2 > v1
    v3 = registry.plan(TASKS + ["1_0"], ["1", "2", "3"]).version  # a new task
    assert v3 > v2
    v4 = registry.plan(TASKS + ["1_0"], ["2", "3"]).version  # an executor lost: moves
    assert v4 > v3
    assert registry.plan(TASKS, ["2", "3"]).version == v4


def test_an_executor_endpoint_raises_the_version_once_and_is_in_the_next_assignment():
    registry = TaskPlacementRegistry("app")
    v1 = registry.plan(TASKS, ["1", "2"]).version
    endpoint = ExecutorEndpoint("1", "10.0.0.5", 7070)
    assert registry.note_endpoint(endpoint)
    assert not registry.note_endpoint(endpoint)  # unchanged
    assignment = registry.plan(TASKS, ["1", "2"])
    assert assignment.version == v1 + 1
    assert assignment.executors["1"] == endpoint
    assert assignment.executors["1"].query_url == "http://10.0.0.5:7070"
    assert assignment.executors["2"].query_url is None
    assert registry.note_endpoint(ExecutorEndpoint("1", "10.0.0.5", 7071))  # a new port
    assert registry.plan(TASKS, ["1", "2"]).version == v1 + 2


def test_standbys_are_never_on_the_active_executor_and_stay_while_alive():
    registry = TaskPlacementRegistry("app", num_standby_replicas=2)
    alive = ["1", "2", "3", "4"]
    first = registry.plan(TASKS, alive)
    for task, placement in first.tasks.items():
        assert len(placement.standbys) == 2, task
        assert placement.active not in placement.standbys
        assert len(set(placement.standbys)) == 2
    # Standbys are spread: every executor keeps some.
    counts = {e: len(first.standby_tasks_of(e)) for e in alive}
    assert all(n > 0 for n in counts.values()), counts
    again = registry.plan(TASKS, alive + ["5"])
    assert {t: p.standbys for t, p in again.tasks.items()} == {
        t: p.standbys for t, p in first.tasks.items()
    }
    assert again.standby_tasks_of("5") == []


def test_a_lost_standby_is_replaced_on_another_live_executor():
    registry = TaskPlacementRegistry("app", num_standby_replicas=1)
    registry.plan(["0_0"], ["1", "2", "3"])
    active = registry.active_of("0_0")
    (standby,) = registry.last.standbys_of("0_0")
    spare = next(e for e in ("1", "2", "3") if e not in (active, standby))
    version = registry.last.version
    assignment = registry.plan(["0_0"], [e for e in ("1", "2", "3") if e != standby])
    assert assignment.active_of("0_0") == active  # a lost standby does not move the task
    assert assignment.epoch_of("0_0") == 1
    assert assignment.standbys_of("0_0") == (spare,)
    assert assignment.version > version


def test_a_task_moved_to_its_standby_gets_a_new_standby_not_on_itself():
    registry = TaskPlacementRegistry("app", num_standby_replicas=1)
    registry.plan(TASKS, ["1", "2", "3"])
    assignment = registry.plan(TASKS, ["2", "3"])
    for task, placement in assignment.tasks.items():
        assert placement.active in ("2", "3"), task
        assert placement.standbys == (("3",) if placement.active == "2" else ("2",)), task


def test_no_standby_with_a_single_executor_and_fewer_than_asked_with_few():
    registry = TaskPlacementRegistry("app", num_standby_replicas=2)
    single = registry.plan(TASKS, ["1"])
    assert all(p.standbys == () for p in single.tasks.values())
    two = registry.plan(TASKS, ["1", "2"])
    assert all(p.standbys == ("2",) for p in two.tasks.values())


def test_no_standbys_when_none_are_asked_for():
    registry = TaskPlacementRegistry("app", num_standby_replicas=0)
    assignment = registry.plan(TASKS, ["1", "2", "3"])
    assert all(p.standbys == () for p in assignment.tasks.values())
    assert assignment.num_standby_replicas == 0


def test_local_mode_keeps_every_task_on_the_driver_at_epoch_1():
    registry = TaskPlacementRegistry("app", num_standby_replicas=1)
    versions = []
    for batch in range(20):
        tasks = TASKS[: 1 + batch % len(TASKS)]
        avoid = {"0_0": "driver"} if batch % 3 == 0 else None  # a retried pass
        assignment = registry.plan(tasks, ["driver"], avoid=avoid)
        versions.append(assignment.version)
        assert all(p.active == "driver" for p in assignment.tasks.values())
        assert all(p.epoch == 1 for p in assignment.tasks.values())
        assert all(p.standbys == () for p in assignment.tasks.values())
    assert registry.move_count == 0
    # The version grows only while new tasks show up (the first four batches).
    assert versions == [1, 2, 3, 4] + [4] * 16


def test_planning_with_no_live_executor_is_refused():
    with pytest.raises(ValueError, match="no live executor"):
        TaskPlacementRegistry("app").plan(TASKS, [])


def test_status_lists_placements_and_moves():
    registry = TaskPlacementRegistry("app", num_standby_replicas=1)
    assert registry.status()["assignment_version"] == 0
    assert registry.status()["tasks"] == {}
    registry.plan(["0_0"], ["1", "2"])
    registry.plan(["0_0"], ["3", "2" if registry.active_of("0_0") == "1" else "1"])
    status = registry.status()
    assert status["assignment_version"] == registry.last.version
    assert status["executors"] == sorted(registry.last.executors)
    placement = registry.last.tasks["0_0"]
    assert status["tasks"] == {
        "0_0": {
            "executor": placement.active,
            "standbys": list(placement.standbys),
            "epoch": 2,
        }
    }
    assert status["moves_total"] == 1
    assert status["moves_by_reason"] == {"to standby": 1}
    assert [m["task"] for m in status["recent_moves"]] == ["0_0"]


def test_assignment_json_round_trip():
    assignment = Assignment(
        application_id="app",
        version=7,
        tasks={
            "0_0": TaskPlacement("1", ("2", "3"), 4),
            "0_1": TaskPlacement(None),
        },
        executors={
            "1": ExecutorEndpoint("1", "h1", 7070),
            "2": ExecutorEndpoint("2", "h2"),
        },
        num_standby_replicas=2,
    )
    back = Assignment.from_json(assignment.to_json())
    assert back == assignment
    assert back.active_of("0_0") == "1"
    assert back.active_of("0_1") is None
    assert back.active_of("9_9") is None
    assert back.epoch_of("0_0") == 4
    assert back.epoch_of("9_9") == 0
    assert back.standbys_of("0_0") == ("2", "3")
    assert back.standby_tasks_of("3") == ["0_0"]
    assert back.standby_tasks_of("1") == []


def test_assignment_from_json_defaults_missing_fields():
    back = Assignment.from_json(
        '{"application_id": "app", "version": 1, "tasks": {"0_0": {"active": "1"}}}'
    )
    assert back.tasks == {"0_0": TaskPlacement("1", (), 0)}
    assert back.executors == {}
    assert back.num_standby_replicas == 0


def test_load_evens_out_onto_caught_up_standbys_one_move_per_plan():
    registry = TaskPlacementRegistry("app", num_standby_replicas=1)
    tasks = [f"0_{p}" for p in range(4)]
    registry.plan(tasks, ["1"])  # one executor: everything there
    registry.plan(tasks, ["1", "2"])  # a second one joins: it gets standbys, not tasks
    assert set(_placement(registry).values()) == {"1"}
    assert all(registry.last.standbys_of(t) == ("2",) for t in tasks)  # type: ignore[union-attr]
    # Not caught up yet: nothing moves.
    registry.plan(tasks, ["1", "2"], caught_up={})
    assert set(_placement(registry).values()) == {"1"}
    # Caught up: one task moves per plan, the old active becomes its standby, until even.
    caught = {t: {"2"} for t in tasks}
    before = _epochs(registry)
    registry.plan(iter(tasks), ["1", "2"], caught_up=caught)  # as the app passes them
    moved = [t for t in tasks if _placement(registry)[t] == "2"]
    assert len(moved) == 1 and registry.last.standbys_of(moved[0]) == ("1",)  # type: ignore[union-attr]
    assert _epochs(registry)[moved[0]] == before[moved[0]] + 1
    assert registry.moves_by_reason["balance (caught-up standby)"] == 1
    registry.plan(tasks, ["1", "2"], caught_up=caught)
    registry.plan(tasks, ["1", "2"], caught_up=caught)  # 2-2: even, no third move
    assert sorted(_placement(registry).values()) == ["1", "1", "2", "2"]
    assert registry.moves_by_reason["balance (caught-up standby)"] == 2


def test_no_balancing_in_retry_passes_or_without_a_caught_up_copy_there():
    registry = TaskPlacementRegistry("app", num_standby_replicas=1)
    tasks = ["0_0", "0_1", "0_2"]
    registry.plan(tasks, ["1"])
    registry.plan(tasks, ["1", "2"])
    registry.plan(tasks, ["1", "2"], avoid={"9_9": "1"}, caught_up={t: {"2"} for t in tasks})
    assert set(_placement(registry).values()) == {"1"}  # a retry pass never balances
    registry.plan(tasks, ["1", "2"], caught_up={t: {"3"} for t in tasks})  # copies elsewhere
    assert set(_placement(registry).values()) == {"1"}
