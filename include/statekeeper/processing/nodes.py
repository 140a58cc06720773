"""The node graph a topology is made of: sources, processors, sinks, and what ops are.

Nodes are plain, picklable descriptions (they travel to Spark executors inside the
Topology); each task turns them into live processors with :meth:`Op.create`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from statekeeper.processing.processor import Processor
from statekeeper.stores.serdes import Serde

SerdeRef = str | Serde[Any]
BatchRole = Literal["stateless", "aggregate"] | None


@dataclass(frozen=True)
class TopicRef:
    """A topic a node reads or writes; repartition topics are named ``<app>-<name>-repartition``.
    ``partitions``: a repartition topic's partition count when the topology sets it (else it
    follows the writing subtopology's inputs)."""

    name: str
    repartition: bool = False
    partitions: int | None = None

    def resolve(self, application_id: str) -> str:
        return f"{application_id}-{self.name}-repartition" if self.repartition else self.name

    def __str__(self) -> str:
        return f"{self.name}-repartition" if self.repartition else self.name


class Op:
    """What a processor node does. Subclasses create the live processor for a task.

    ``batch_role`` says whether the op can run in the vectorised fast path of a linear
    chain (see :mod:`statekeeper.processing.vectorized`): "stateless" ops implement
    ``apply_batch``, "aggregate" ops ``aggregate_batch``.
    """

    kind = "KSTREAM-PROCESSOR"
    batch_role: BatchRole = None
    uses_stream_time = False  # needs the persisted task stream time / punctuations

    def create(self) -> Processor:
        raise NotImplementedError


@dataclass(kw_only=True)
class Node:
    """A node of the topology graph."""

    name: str
    order: int
    parents: list[str] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    stores: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class SourceNode(Node):
    """Reads topics and deserializes records."""

    topics: list[TopicRef]
    key_serde: SerdeRef
    value_serde: SerdeRef


@dataclass(kw_only=True)
class ProcessorNode(Node):
    """Runs an :class:`Op` on every record it receives."""

    op: Op


@dataclass(kw_only=True)
class SinkNode(Node):
    """Serializes records and emits them to a topic (partition chosen by the key's murmur2)."""

    topic: TopicRef
    key_serde: SerdeRef
    value_serde: SerdeRef
    key_required: bool = False  # repartition for grouping: keyless records go to the DLQ


@dataclass(frozen=True)
class BufferInfo:
    """Serdes of a suppression buffer store (the store itself holds bytes)."""

    key_serde: SerdeRef
    value_serde: SerdeRef
    window_size_ms: int
