"""The driver's side of placement for one app run: which executors are alive, where each
run of a batch goes (:class:`~statekeeper.placement.registry.TaskPlacementRegistry`), the
shares the batch's Spark tasks take, which results still count, and which runs move away
when a pass over the batch leaves them unrun.

In local mode Spark has one executor (``driver``) and this is a no-op in effect: every task
is placed there, epoch 1, for the app's lifetime.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any, Protocol, TypeVar

from statekeeper.cluster.executor import DRIVER_EXECUTOR_ID
from statekeeper.placement.assignment import Assignment
from statekeeper.placement.registry import TaskPlacementRegistry
from statekeeper.placement.shares import spread_runs

log = logging.getLogger("statekeeper.app")


class PlacedRun(Protocol):
    """What placement reads of a batch's run of one task (a dataclass: placing it replaces
    ``executor``, ``epoch`` and ``planned_at``)."""

    task_id: str
    subtopology: int
    executor: str | None
    epoch: int


class RunResult(Protocol):
    """What placement reads of a task run's result."""

    task_id: str
    batch_id: int
    executor_id: str
    epoch: int


Run = TypeVar("Run", bound=PlacedRun)
Result = TypeVar("Result", bound=RunResult)


def alive_executors(spark_context: Any) -> list[str]:
    """Spark's live executor ids (``["driver"]`` in local mode, which has no other; asking a
    local SparkContext would log "Requesting executors is not supported" at every call)."""
    if str(spark_context.master).startswith("local"):
        return [DRIVER_EXECUTOR_ID]
    ids = str(spark_context._jsc.sc().getExecutorIds().mkString(",")).strip()
    alive = sorted((i for i in ids.split(",") if i), key=lambda i: (len(i), i))
    return alive or [DRIVER_EXECUTOR_ID]


def avoid_next_pass(
    placed: Iterable[PlacedRun], ran: Iterable[str], still_alive: set[str], attempt: int
) -> dict[str, str]:
    """Runs of a pass that did not run, mapped to the executor the next pass moves them
    away from: at once when that executor is gone, from the third pass on otherwise (the
    second pass gives an executor whose Spark tasks all landed elsewhere another chance, so
    a task does not leave its state for one unlucky pass). ``attempt`` counts from 0."""
    done = set(ran)
    return {
        run.task_id: run.executor
        for run in placed
        if run.task_id not in done
        and run.executor is not None
        and (attempt >= 1 or run.executor not in still_alive)
    }


class ExecutorPlacement:
    """Placement decisions for one app run: runs tagged with their executor and epoch,
    their shares, and the results that still count."""

    def __init__(
        self,
        application_id: str,
        num_standby_replicas: int = 0,
        has_state: Callable[[int], bool] | None = None,
        epoch_base: int = 0,
    ) -> None:
        """``has_state(subtopology)``: whether its tasks keep stores (a stateless task moves
        for free, so balancing may move it anywhere); ``epoch_base``: see
        :mod:`statekeeper.app.epoch_base`."""
        self._has_state = has_state or (lambda _sub: True)
        self._stateless: set[str] = set()
        self.registry = TaskPlacementRegistry(application_id, num_standby_replicas, epoch_base)
        self.stale_results = 0  # results dropped because their epoch was no longer current

    def place(
        self,
        runs: list[Run],
        alive: list[str],
        avoid: dict[str, str] | None = None,
        caught_up: dict[str, set[str]] | None = None,
    ) -> tuple[list[Run], Assignment]:
        """``runs`` tagged with their executor and epoch, and the assignment they follow.
        ``caught_up``: per task, executors whose standby copy is caught up (balancing moves
        a stateful task only there)."""
        self._stateless.update(r.task_id for r in runs if not self._has_state(r.subtopology))
        assignment = self.registry.plan(
            [r.task_id for r in runs],
            alive,
            avoid=avoid,
            caught_up=caught_up,
            stateless=self._stateless,
        )
        planned_at = time.time()
        placed = [
            replace(  # type: ignore[type-var]  # every run type is a dataclass
                r,
                executor=assignment.active_of(r.task_id),
                epoch=assignment.epoch_of(r.task_id),
                planned_at=planned_at,
            )
            for r in runs
        ]
        return placed, assignment

    @staticmethod
    def shares(runs: list[Run], alive: list[str], parallelism: int) -> list[list[Run]]:
        """One share per core of each executor (about), each with runs placed there only."""
        slots = max(1, parallelism // max(1, len(alive)))
        shares: list[list[Run]] = []
        for executor in alive:
            mine = [r for r in runs if r.executor == executor]
            if mine:
                shares += spread_runs(mine, slots)
        return shares

    def current_results(self, results: list[Result]) -> list[Result]:
        """``results`` minus those of a task run under an epoch that is no longer its own (a
        frozen executor's, arriving after the task moved): counted, never used."""
        kept = []
        for result in results:
            current = self.registry.epoch_of(result.task_id)
            if result.epoch and current and result.epoch != current:
                self.stale_results += 1
                log.warning(
                    "task %s: result of batch %d from executor %s under epoch %d dropped: the "
                    "task's epoch is %d now",
                    result.task_id,
                    result.batch_id,
                    result.executor_id,
                    result.epoch,
                    current,
                )
                continue
            kept.append(result)
        return kept

    def live_executors(self) -> set[str] | None:
        """The executors alive at the last placement (None before the first)."""
        last = self.registry.last
        return None if last is None else set(last.executors)

    def status(self) -> dict[str, Any]:
        """For the status document: placements and moves."""
        return self.registry.status()
