"""Sticky task placement on the driver (Kafka Streams' HighAvailabilityTaskAssignor, cut down).

A task's state lives on the executor where it last ran, so the task stays there while that
executor is alive. When it is gone, the task goes to an executor holding a standby copy of it
(only the tail replays there), else to the least loaded live executor (a restore from the
snapshot + tail, or the changelog). Every change of a task's executor raises the task's
*epoch*: a copy of the task left open in a worker under an older epoch is stale, so it is
never committed or reused (it is closed and caught up from the changelog when the task comes
back). Standbys: ``num_standby_replicas`` other live executors per task, kept where they are
while alive, the least loaded otherwise.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from statekeeper.placement.assignment import Assignment, ExecutorEndpoint, TaskPlacement


@dataclass(frozen=True)
class TaskMove:
    """A task that changed executor, and why."""

    task_id: str
    from_executor: str | None
    to_executor: str
    reason: str  # "executor lost", "not scheduled", "to standby"
    at: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task_id,
            "from": self.from_executor,
            "to": self.to_executor,
            "reason": self.reason,
            "at": round(self.at, 3),
        }


class TaskPlacementRegistry:
    """Where each task runs and keeps standbys; :meth:`plan` gives the batch's
    :class:`Assignment`."""

    def __init__(
        self, application_id: str, num_standby_replicas: int = 0, epoch_base: int = 0
    ) -> None:
        """``epoch_base``: epochs of this run start above it (app.epoch_base: they grow
        across driver restarts, as changelog fencing needs)."""
        self.application_id = application_id
        self.epoch_base = epoch_base
        self.run_id = uuid.uuid4().hex[:12]  # versions count from 1 again in every run
        self.num_standby_replicas = num_standby_replicas
        self._active: dict[str, str] = {}
        self._standbys: dict[str, tuple[str, ...]] = {}
        self._epoch: dict[str, int] = {}
        self._endpoints: dict[str, ExecutorEndpoint] = {}
        self._version = 0
        self._last: Assignment | None = None
        self.moves: deque[TaskMove] = deque(maxlen=200)
        self.move_count = 0
        self.moves_by_reason: Counter[str] = Counter()

    # -- decisions ---------------------------------------------------------------------------

    def plan(
        self,
        task_ids: Iterable[str],
        alive: list[str],
        *,
        avoid: dict[str, str] | None = None,
        caught_up: dict[str, set[str]] | None = None,
        stateless: set[str] | None = None,
    ) -> Assignment:
        """The assignment of ``task_ids`` (plus every task seen before) over the ``alive``
        executors. ``avoid`` maps tasks that did not run where they were sent to the
        executor to move them away from (a task already elsewhere stays there).
        ``caught_up`` maps tasks to the executors whose standby copy of them is caught up:
        one such task may move there to even out the load (see :meth:`_balance`);
        ``stateless`` tasks have nothing to restore and balance apart from the others."""
        if not alive:
            raise ValueError("no live executor to place tasks on")
        avoid = avoid or {}
        task_ids = set(task_ids)  # read twice below: an iterator would be empty the second time
        alive_set = set(alive)
        tasks = sorted(set(task_ids) | set(self._active))
        load = Counter(a for t, a in self._active.items() if a in alive_set and avoid.get(t) != a)
        changed = False
        for task in tasks:
            current = self._active.get(task)
            if current in alive_set and avoid.get(task) != current:
                continue
            candidates = [e for e in alive if e != avoid.get(task)] or list(alive)
            standby = [e for e in self._standbys.get(task, ()) if e in candidates]
            target = standby[0] if standby else min(candidates, key=lambda e: (load[e], e))
            if target == current:  # nowhere else to go (a single executor): not a move
                load[target] += 1
                continue
            if current is not None:
                reason = "to standby" if standby else "executor lost"
                if current in alive_set:  # moved only because it did not run there
                    reason = "not scheduled" + (" (to standby)" if standby else "")
                self._note_move(task, current, target, reason)
            self._active[task] = target
            self._epoch[task] = self._epoch.get(task, self.epoch_base) + 1
            load[target] += 1
            changed = True
        if not avoid:
            free = stateless or set()
            anywhere = {t: set(alive) for t in free}
            # Stateful and stateless tasks even out separately, as Kafka Streams does.
            changed |= self._balance(
                task_ids - free, alive, caught_up or {}, free.__contains__, False
            )
            changed |= self._balance(task_ids & free, alive, anywhere, free.__contains__, True)
        changed |= self._place_standbys(tasks, alive)
        if changed or self._last is None or set(self._last.executors) != alive_set:
            self._version += 1
        self._last = Assignment(
            application_id=self.application_id,
            version=self._version,
            tasks={
                t: TaskPlacement(self._active[t], self._standbys.get(t, ()), self._epoch[t])
                for t in tasks
            },
            executors={e: self._endpoints.get(e, ExecutorEndpoint(e, "")) for e in alive},
            num_standby_replicas=self.num_standby_replicas,
            run_id=self.run_id,
        )
        return self._last

    def _balance(
        self,
        runnable: set[str],
        alive: list[str],
        caught_up: dict[str, set[str]],
        is_stateless: Callable[[str], bool],
        stateless_class: bool,
    ) -> bool:
        """Kafka Streams' probing rebalance, cut down: when one executor runs two or more
        tasks more than another (e.g. a restarted worker that got nothing back), move one
        task of the busiest to the least busy, if a caught-up standby copy of it is there
        (so the move replays next to nothing). The old active becomes that task's standby
        (its copy is the freshest). One move per plan, so load evens out over a few batches
        and a flapping executor list cannot move everything at once."""
        if len(alive) < 2:
            return False
        alive_set = set(alive)
        load = Counter({e: 0 for e in alive})
        load.update(
            a
            for t, a in self._active.items()
            if a in alive_set and is_stateless(t) == stateless_class
        )
        busiest = max(alive, key=lambda e: (load[e], e))
        idlest = min(alive, key=lambda e: (load[e], e))
        if load[busiest] - load[idlest] < 2:
            return False
        movable = sorted(
            t
            for t in runnable
            if self._active.get(t) == busiest and idlest in caught_up.get(t, set())
        )
        if not movable:
            return False
        task = movable[0]
        self._note_move(task, busiest, idlest, "balance (caught-up standby)")
        self._active[task] = idlest
        self._epoch[task] = self._epoch.get(task, self.epoch_base) + 1
        self._standbys[task] = tuple(
            busiest if e == idlest else e for e in self._standbys.get(task, ())
        )
        return True

    def _place_standbys(self, tasks: list[str], alive: list[str]) -> bool:
        if self.num_standby_replicas <= 0:
            return False
        alive_set = set(alive)
        load = Counter(e for t in tasks for e in self._standbys.get(t, ()) if e in alive_set)
        changed = False
        for task in tasks:
            active = self._active[task]
            keep = [e for e in self._standbys.get(task, ()) if e in alive_set and e != active]
            others = sorted(
                (e for e in alive if e != active and e not in keep), key=lambda e: (load[e], e)
            )
            while len(keep) < self.num_standby_replicas and others:
                chosen = others.pop(0)
                keep.append(chosen)
                load[chosen] += 1
            if tuple(keep) != self._standbys.get(task, ()):
                self._standbys[task] = tuple(keep)
                changed = True
        return changed

    def _note_move(self, task: str, source: str | None, target: str, reason: str) -> None:
        self.moves.append(TaskMove(task, source, target, reason, time.time()))
        self.move_count += 1
        self.moves_by_reason[reason] += 1

    # -- what executors report ----------------------------------------------------------------

    def note_endpoint(self, endpoint: ExecutorEndpoint) -> bool:
        """An executor's host and query port (True when new or changed)."""
        if self._endpoints.get(endpoint.executor_id) == endpoint:
            return False
        self._endpoints[endpoint.executor_id] = endpoint
        self._version += 1
        return True

    def active_of(self, task_id: str) -> str | None:
        return self._active.get(task_id)

    def epoch_of(self, task_id: str) -> int:
        return self._epoch.get(task_id, 0)

    @property
    def last(self) -> Assignment | None:
        return self._last

    def status(self) -> dict[str, Any]:
        """For the status document: placements, moves."""
        last = self._last
        return {
            "assignment_version": last.version if last else 0,
            "executors": sorted(last.executors) if last else [],
            "tasks": {
                t: {"executor": p.active, "standbys": list(p.standbys), "epoch": p.epoch}
                for t, p in (last.tasks.items() if last else ())
            },
            "moves_total": self.move_count,
            "moves_by_reason": dict(self.moves_by_reason),
            "recent_moves": [m.as_dict() for m in list(self.moves)[-20:]],
        }
