"""A built topology: the node graph split into subtopologies, and what the runner asks of it.

Subtopologies are the connected parts of the graph (nodes joined by edges or by a shared
store), cut at repartition topics: subtopology N writes ``<app>-<name>-repartition`` and
N+1 reads it. Each subtopology runs as one task per input partition (task id
``<subtopology>_<partition>``, R1 in docs/invariants.md). Topic names that depend on the application
id are resolved by the ``application_id`` argument of each method.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from statekeeper.processing.dlq import dlq_topic
from statekeeper.processing.errors import CopartitioningError, TopologyError
from statekeeper.processing.nodes import (
    BufferInfo,
    Node,
    ProcessorNode,
    SinkNode,
    SourceNode,
    TopicRef,
)
from statekeeper.processing.task_state_store import task_state_spec, task_state_store_name
from statekeeper.state.task_id import TaskId
from statekeeper.stores.builders import StoreSpec


def task_id(subtopology_id: int, partition: int) -> str:
    """``<subtopology>_<partition>``, as in Kafka Streams (R1, docs/invariants.md; the format
    is :class:`statekeeper.state.task_id.TaskId`'s)."""
    return str(TaskId(subtopology_id, partition))


@dataclass(frozen=True)
class CarriedInput:
    """An old version's repartition topic a new version reads once when it takes over
    (:mod:`statekeeper.versions.takeover`): as if from ``new_topic``, and only records of
    the old version's committed micro-batches (``sk.batch`` at most ``max_batch``).
    ``partitions``: the new topic's partition count when the state was re-keyed: the task
    reads every old partition and keeps the records whose key it holds."""

    new_topic: str
    max_batch: int
    partitions: int | None = None


@dataclass
class Subtopology:
    """One independently scheduled part of the topology."""

    id: int
    nodes: list[str]  # in creation order
    sources: list[str]
    sinks: list[str]
    stores: list[str]  # user and DSL stores (not the internal task-state store)
    task_state_store: str | None = None
    vector_chain: list[str] | None = None  # node names, when the batch fast path applies
    source_refs: list[TopicRef] = field(default_factory=list)
    sink_refs: list[TopicRef] = field(default_factory=list)

    def source_topics(self, application_id: str) -> list[str]:
        return [ref.resolve(application_id) for ref in self.source_refs]


class Topology:
    """The compiled, picklable topology the runner and the stream tasks use."""

    def __init__(
        self,
        nodes: dict[str, Node],
        stores: dict[str, StoreSpec],
        buffers: dict[str, BufferInfo],
        subtopologies: list[Subtopology],
        processing_errors: str = "dlq",
    ) -> None:
        self.nodes = nodes
        self.stores = stores
        self.buffers = buffers
        self.subtopologies = subtopologies
        self.processing_errors = processing_errors
        #: Old repartition topic -> what it feeds, while a new version takes over.
        self.carried_inputs: dict[str, CarriedInput] = {}

    # -- subtopologies and stores ----------------------------------------------------------

    def subtopology(self, subtopology_id: int) -> Subtopology:
        for sub in self.subtopologies:
            if sub.id == subtopology_id:
                return sub
        raise TopologyError(
            f"no subtopology {subtopology_id}; ids: {[s.id for s in self.subtopologies]}"
        )

    def store_specs(self, subtopology_id: int) -> list[StoreSpec]:
        """Specs of every store a task of the subtopology opens, internal ones included."""
        sub = self.subtopology(subtopology_id)
        specs = [self.stores[name] for name in sub.stores]
        if sub.task_state_store is not None:
            specs.append(task_state_spec(sub.id))
        return specs

    # -- topics ----------------------------------------------------------------------------

    def source_topics(self, application_id: str) -> list[str]:
        """External input topics (not repartition topics), in first-use order."""
        return _unique(
            ref.resolve(application_id)
            for sub in self.subtopologies
            for ref in sub.source_refs
            if not ref.repartition
        )

    def internal_topics(self, application_id: str) -> list[str]:
        """Repartition topics (``<app>-<name>-repartition``) the app must create."""
        return _unique(
            ref.resolve(application_id)
            for sub in self.subtopologies
            for ref in sub.sink_refs
            if ref.repartition
        )

    def output_topics(self, application_id: str) -> list[str]:
        """External topics written by ``to()`` (the DLQ topic is :meth:`dlq_topic`)."""
        return _unique(
            ref.resolve(application_id)
            for sub in self.subtopologies
            for ref in sub.sink_refs
            if not ref.repartition
        )

    def dlq_topic(self, application_id: str) -> str:
        return dlq_topic(application_id)

    def subtopology_topics(self, application_id: str, subtopology_id: int) -> list[str]:
        """Every topic a subtopology reads (repartition topics included)."""
        return self.subtopology(subtopology_id).source_topics(application_id)

    def subtopology_of(self, application_id: str, topic: str) -> int:
        """The subtopology that reads ``topic``."""
        for sub in self.subtopologies:
            if topic in sub.source_topics(application_id):
                return sub.id
        raise TopologyError(f"topic {topic!r} is not read by this topology")

    def copartition_groups(self, application_id: str) -> list[list[str]]:
        """Topics that must have equal partition counts: the inputs of each subtopology that
        reads more than one topic (joins, merged sources; R1 in docs/invariants.md)."""
        return [
            sorted(sub.source_topics(application_id))
            for sub in self.subtopologies
            if len(sub.source_refs) > 1
        ]

    def check_copartitioning(self, application_id: str, partitions: dict[str, int]) -> None:
        """Raise :class:`CopartitioningError` naming the topics if a group disagrees."""
        for group in self.copartition_groups(application_id):
            counts = {t: partitions[t] for t in group if t in partitions}
            if len(set(counts.values())) > 1:
                detail = ", ".join(f"{t}={n}" for t, n in sorted(counts.items()))
                raise CopartitioningError(
                    "topics read by one subtopology (joined or merged) must be co-partitioned, "
                    f"i.e. have the same number of partitions; found {detail}. Repartition one "
                    "side (KStream.repartition) or recreate the topic with matching partitions"
                )

    def repartition_partitions(
        self, application_id: str, partitions: dict[str, int]
    ) -> dict[str, int]:
        """Partition count for each repartition topic, as Kafka Streams picks it: the count
        the topology sets (``Grouped.with_partitions``), else the count of a co-partitioned
        external topic if there is one, else the max over the inputs of the writing
        subtopology (chained repartitions resolved in order)."""
        known = dict(partitions)
        result: dict[str, int] = {}
        for sub in self.subtopologies:  # writers come before readers
            inputs = [known[t] for t in sub.source_topics(application_id) if t in known]
            width = max(inputs, default=1)
            for ref in sub.sink_refs:
                if ref.repartition:
                    topic = ref.resolve(application_id)
                    result[topic] = known.setdefault(topic, ref.partitions or width)
        explicit = {
            ref.resolve(application_id)
            for sub in self.subtopologies
            for ref in sub.sink_refs
            if ref.repartition and ref.partitions
        }
        for group in self.copartition_groups(application_id):
            external = [partitions[t] for t in group if t in partitions]
            if external:
                for topic in group:
                    if topic in result and topic not in explicit:  # a set count is checked
                        result[topic] = external[0]
        return result

    # -- description -----------------------------------------------------------------------

    def describe(self) -> str:
        """Text like Kafka Streams' ``Topology.describe()``."""
        lines = ["Topologies:"]
        for sub in self.subtopologies:
            lines.append(f"   Sub-topology: {sub.id}")
            for name in sub.nodes:
                node = self.nodes[name]
                if isinstance(node, SourceNode):
                    topics = ", ".join(str(t) for t in node.topics)
                    lines.append(f"    Source: {name} (topics: [{topics}])")
                elif isinstance(node, SinkNode):
                    lines.append(f"    Sink: {name} (topic: {node.topic})")
                else:
                    lines.append(f"    Processor: {name} (stores: [{', '.join(node.stores)}])")
                if node.children:
                    lines.append(f"      --> {', '.join(node.children)}")
                elif not isinstance(node, SinkNode):
                    lines.append("      --> none")
                if node.parents:
                    lines.append(f"      <-- {', '.join(node.parents)}")
            if sub.task_state_store:
                lines.append(f"    Internal store: {sub.task_state_store}")
            if sub.vector_chain:
                lines.append("    Execution: vectorised linear chain")
            lines.append("")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"Topology(subtopologies={[s.id for s in self.subtopologies]})"


def _unique(items: object) -> list[str]:
    return list(dict.fromkeys(items))  # type: ignore[call-overload]


# -- compilation -----------------------------------------------------------------------------


def compile_topology(
    nodes: dict[str, Node],
    stores: dict[str, StoreSpec],
    buffers: dict[str, BufferInfo],
    processing_errors: str = "dlq",
) -> Topology:
    """Validate the graph and split it into subtopologies."""
    if processing_errors not in ("dlq", "fail"):
        raise TopologyError(f"processing_errors must be 'dlq' or 'fail', got {processing_errors!r}")
    if not nodes:
        raise TopologyError("the topology is empty: add a stream or table first")
    _validate(nodes, stores)
    ordered = sorted(nodes.values(), key=lambda n: n.order)
    parent = {n.name: n.name for n in ordered}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(a: str, b: str) -> None:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb, key=lambda r: nodes[r].order)] = min(
                ra, rb, key=lambda r: nodes[r].order
            )

    store_owner: dict[str, str] = {}
    for node in ordered:
        for p in node.parents:
            union(node.name, p)
        for store in node.stores:
            if store in store_owner:
                union(node.name, store_owner[store])
            else:
                store_owner[store] = node.name
    groups: dict[str, list[Node]] = {}
    for node in ordered:
        groups.setdefault(find(node.name), []).append(node)
    subs = []
    for sid, members in enumerate(sorted(groups.values(), key=lambda g: g[0].order)):
        subs.append(_subtopology(sid, members, nodes, stores, buffers))
    _check_repartition_pairs(subs)
    return Topology(dict(nodes), dict(stores), dict(buffers), subs, processing_errors)


def _validate(nodes: dict[str, Node], stores: dict[str, StoreSpec]) -> None:
    readers: dict[TopicRef, str] = {}
    for node in nodes.values():
        for store in node.stores:
            if store not in stores:
                raise TopologyError(
                    f"node {node.name} uses store {store!r}, which is not defined; add it with "
                    "StreamsBuilder.add_state_store(Stores...)"
                )
        if isinstance(node, SourceNode):
            for topic in node.topics:
                if topic in readers:
                    raise TopologyError(
                        f"topic {topic} is read by two sources ({readers[topic]}, {node.name}); "
                        "read it once and reuse the stream"
                    )
                readers[topic] = node.name
    used = {s for n in nodes.values() for s in n.stores}
    unused = sorted(set(stores) - used)
    if unused:
        raise TopologyError(
            f"store(s) {unused} are not connected to any processor; pass them to "
            "KStream.process(..., stores=[...])"
        )


def _subtopology(
    sid: int,
    members: list[Node],
    nodes: dict[str, Node],
    stores_by_name: dict[str, StoreSpec],
    buffers: dict[str, BufferInfo],
) -> Subtopology:
    sources = [n for n in members if isinstance(n, SourceNode)]
    sinks = [n for n in members if isinstance(n, SinkNode)]
    if not sources:
        raise TopologyError(f"nodes {[n.name for n in members]} are not fed by any source")
    stores = list(dict.fromkeys(s for n in members for s in n.stores))
    ops = [n.op for n in members if isinstance(n, ProcessorNode)]
    source_refs = [t for n in sources for t in n.topics]
    needs_state = (
        bool(stores)
        or any(t.repartition for t in source_refs)
        or any(op.uses_stream_time for op in ops)
    )
    sub = Subtopology(
        id=sid,
        nodes=[n.name for n in members],
        sources=[n.name for n in sources],
        sinks=[n.name for n in sinks],
        stores=stores,
        task_state_store=task_state_store_name(sid) if needs_state else None,
        source_refs=source_refs,
        sink_refs=[n.topic for n in sinks],
    )
    sub.vector_chain = _vector_chain(sources, nodes, stores_by_name, buffers)
    return sub


def _vector_chain(
    sources: list[SourceNode],
    nodes: dict[str, Node],
    stores: dict[str, StoreSpec],
    buffers: dict[str, BufferInfo],
) -> list[str] | None:
    """The node names of a linear source → stateless* → [aggregate → stateless*] → [sink]
    chain, or None when the subtopology needs record-at-a-time processing. An LRU store
    evicts by access order, which only record-at-a-time processing reproduces."""
    if len(sources) != 1 or len(sources[0].topics) != 1:
        return None
    chain: list[str] = [sources[0].name]
    node: Node = sources[0]
    aggregates = 0
    while node.children:
        if len(node.children) != 1 or isinstance(node, SinkNode):
            return None
        node = nodes[node.children[0]]
        if len(node.parents) != 1:
            return None
        if isinstance(node, ProcessorNode):
            role = node.op.batch_role
            if role is None:
                return None
            if role == "aggregate":
                aggregates += 1
                if aggregates > 1 or any(
                    s in buffers or stores[s].kind == "lru" for s in node.stores
                ):
                    return None
            elif node.stores:
                return None
        chain.append(node.name)
    return chain


def _check_repartition_pairs(subs: list[Subtopology]) -> None:
    written = {t for s in subs for t in s.sink_refs if t.repartition}
    read = {t for s in subs for t in s.source_refs if t.repartition}
    if written != read:
        raise TopologyError(
            f"repartition topics written but not read: {sorted(map(str, written - read))}; "
            f"read but not written: {sorted(map(str, read - written))}"
        )
