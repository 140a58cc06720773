"""Where a key lives: its partition, its task, the executors holding that task (KIP-535's
``KeyQueryMetadata``), and what this executor holds of a task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from statekeeper.kafka.partitioning import partition_for_key
from statekeeper.placement.assignment import Assignment
from statekeeper.processing.task_state_store import STORE_PREFIX
from statekeeper.processing.topology import task_id
from statekeeper.state.task_id import TaskId
from statekeeper.stores.builders import StoreSpec


class TopologyLike(Protocol):
    """What the server needs of a topology (a compiled
    :class:`~statekeeper.processing.topology.Topology` is one): its subtopologies (objects
    with an ``id``) and each one's store specs."""

    subtopologies: Any

    def store_specs(self, subtopology_id: int) -> list[StoreSpec]: ...


@dataclass(frozen=True)
class StoreEntry:
    """A store of the topology: its spec and the subtopology whose tasks hold it."""

    spec: StoreSpec
    subtopology: int

    @property
    def internal(self) -> bool:
        return self.spec.name.startswith(STORE_PREFIX)

    @property
    def queryable(self) -> bool:
        """Only persistent stores have files another process can read (a custom engine:
        through its supplier's read-only view)."""
        supplier = self.spec.supplier
        return self.spec.persistent and (supplier is None or supplier.has_read_only_view)

    def describe(self) -> dict[str, Any]:
        spec = self.spec
        doc: dict[str, Any] = {
            "name": spec.name,
            "kind": spec.kind,
            "subtopology": self.subtopology,
            "key_serde": spec.key_serde if isinstance(spec.key_serde, str) else "custom",
            "value_serde": spec.value_serde if isinstance(spec.value_serde, str) else "custom",
            "persistent": spec.persistent,
            "engine": spec.engine,
            "queryable": self.queryable,
            "internal": self.internal,
        }
        if spec.kind == "window":
            doc.update(window_size_ms=spec.window_size_ms, retention_ms=spec.retention_ms)
        return doc


def store_catalog(topology: TopologyLike) -> dict[str, StoreEntry]:
    """``{store name: StoreEntry}`` of every store of ``topology`` (internal ones too)."""
    return {
        spec.name: StoreEntry(spec, sub.id)
        for sub in topology.subtopologies
        for spec in topology.store_specs(sub.id)
    }


def subtopology_partitions(assignment: Assignment, subtopology: int) -> int:
    """How many tasks (= input partitions) the subtopology has in the assignment (0: none)."""
    partitions = [
        tid.partition
        for t in assignment.tasks
        if (tid := TaskId.try_parse(t)) is not None and tid.subtopology == subtopology
    ]
    return max(partitions) + 1 if partitions else 0


def host_of(assignment: Assignment, executor_id: str | None) -> dict[str, Any] | None:
    """``{"executor", "host", "query_url"}`` of an executor of the assignment."""
    if executor_id is None:
        return None
    endpoint = assignment.executors.get(executor_id)
    return {
        "executor": executor_id,
        "host": endpoint.host if endpoint else None,
        "query_url": endpoint.query_url if endpoint else None,
    }


@dataclass(frozen=True)
class KeyQueryMetadata:
    """The task a key of a store belongs to and the executors holding it."""

    store: str
    partition: int
    task: str
    active: dict[str, Any] | None
    standbys: tuple[dict[str, Any], ...]
    assignment_version: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "partition": self.partition,
            "task": self.task,
            "active": self.active,
            "standbys": list(self.standbys),
            "assignment_version": self.assignment_version,
        }


def task_metadata(
    assignment: Assignment, store: str, subtopology: int, partition: int
) -> KeyQueryMetadata:
    tid = task_id(subtopology, partition)
    return KeyQueryMetadata(
        store=store,
        partition=partition,
        task=tid,
        active=host_of(assignment, assignment.active_of(tid)),
        standbys=tuple(
            h for e in assignment.standbys_of(tid) if (h := host_of(assignment, e)) is not None
        ),
        assignment_version=assignment.version,
    )


def key_metadata(
    assignment: Assignment, entry: StoreEntry, key: bytes, partitions: int
) -> KeyQueryMetadata | None:
    """Where ``key`` (serialized with the store's key serde) lives; None when the assignment
    has no task of the store's subtopology yet. ``partitions``: the subtopology's task count
    in ``assignment`` (:func:`subtopology_partitions`; the query server counts it once per
    assignment)."""
    if partitions == 0:
        return None
    partition = partition_for_key(key, partitions)
    return task_metadata(assignment, entry.spec.name, entry.subtopology, partition)
