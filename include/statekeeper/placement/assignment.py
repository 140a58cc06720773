"""Where every task runs, and where its standbys are: what the driver decides each batch and
every executor receives (plain data, JSON round trip)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class TaskPlacement:
    """One task: the executor running it (``active``; None before it first runs), the
    executors keeping standby copies of its stores, and its epoch (raised whenever the task
    changes executor: a copy open under an older epoch is stale)."""

    active: str | None
    standbys: tuple[str, ...] = ()
    epoch: int = 0


@dataclass(frozen=True)
class ExecutorEndpoint:
    """An executor's host and its query server (``query_port`` None: no server there)."""

    executor_id: str
    host: str
    query_port: int | None = None

    @property
    def query_url(self) -> str | None:
        return None if self.query_port is None else f"http://{self.host}:{self.query_port}"


@dataclass(frozen=True)
class Assignment:
    """The placement of every task of an app (``version`` grows with every change, within
    one app run: ``run_id`` names the driver's run, as a restarted driver counts from 1
    again)."""

    application_id: str
    version: int
    tasks: dict[str, TaskPlacement] = field(default_factory=dict)
    executors: dict[str, ExecutorEndpoint] = field(default_factory=dict)
    num_standby_replicas: int = 0
    run_id: str = ""

    def active_of(self, task_id: str) -> str | None:
        placement = self.tasks.get(task_id)
        return placement.active if placement else None

    def epoch_of(self, task_id: str) -> int:
        placement = self.tasks.get(task_id)
        return placement.epoch if placement else 0

    def standbys_of(self, task_id: str) -> tuple[str, ...]:
        placement = self.tasks.get(task_id)
        return placement.standbys if placement else ()

    def standby_tasks_of(self, executor_id: str) -> list[str]:
        """The tasks ``executor_id`` keeps a standby copy of."""
        return sorted(t for t, p in self.tasks.items() if executor_id in p.standbys)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Assignment:
        raw: dict[str, Any] = json.loads(text)
        return cls(
            application_id=raw["application_id"],
            version=int(raw["version"]),
            tasks={
                t: TaskPlacement(p["active"], tuple(p.get("standbys", ())), int(p.get("epoch", 0)))
                for t, p in raw.get("tasks", {}).items()
            },
            executors={e: ExecutorEndpoint(**v) for e, v in raw.get("executors", {}).items()},
            num_standby_replicas=int(raw.get("num_standby_replicas", 0)),
            run_id=str(raw.get("run_id", "")),
        )
