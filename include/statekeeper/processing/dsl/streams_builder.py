"""StreamsBuilder: the entry point of the DSL (``stream``, ``table``, ``build``).

```python
builder = StreamsBuilder()
lines = builder.stream("lines", key_serde="bytes", value_serde="str")
(lines.flat_map_values(str.split)
      .group_by(lambda _k, word: word, Grouped.as_("words"))
      .count(Materialized.as_("word-counts"))
      .to_stream().map_values(str).to("word-counts", value_serde="str"))
topology = builder.build()
```

Nodes get Kafka-Streams-style names (``KSTREAM-MAP-0000000001``); unnamed stores get
lower-case generated names (``kstream-aggregate-state-store-0000000003``) that are safe in
changelog and repartition topic names.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from statekeeper.processing.dsl.kstream import KStream
from statekeeper.processing.dsl.ktable import KTable
from statekeeper.processing.dsl.materialized import Materialized, materialized_or_default
from statekeeper.processing.errors import TopologyError
from statekeeper.processing.nodes import (
    BufferInfo,
    Node,
    Op,
    ProcessorNode,
    SerdeRef,
    SinkNode,
    SourceNode,
    TopicRef,
)
from statekeeper.processing.processors.table import MaterializeOp
from statekeeper.processing.task_state_store import STORE_PREFIX
from statekeeper.processing.topology import Topology, compile_topology
from statekeeper.stores.builders import StoreSpec

_TOPIC_RE = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class StreamsBuilder:
    """Builds a topology with the DSL; ``build()`` compiles it into a :class:`Topology`.

    ``processing_errors``: "dlq" (default) sends a record whose processing raised to the
    dead-letter topic and continues; "fail" fails the batch instead. Undecodable records
    always go to the DLQ.
    """

    def __init__(
        self,
        *,
        default_key_serde: SerdeRef = "str",
        default_value_serde: SerdeRef = "json",
        processing_errors: str = "dlq",
    ) -> None:
        self.default_key_serde = default_key_serde
        self.default_value_serde = default_value_serde
        self.processing_errors = processing_errors
        self._nodes: dict[str, Node] = {}
        self._stores: dict[str, StoreSpec] = {}
        self._buffers: dict[str, BufferInfo] = {}
        self._index = 0

    # -- naming ----------------------------------------------------------------------------

    def _next_index(self) -> int:
        index = self._index
        self._index += 1
        return index

    def _generated_name(self, prefix: str) -> str:
        """A lower-case generated name (stores, repartition topics)."""
        return f"{prefix}-{self._next_index():010d}".lower()

    def _store_name(self, prefix: str) -> str:
        return self._generated_name(f"{prefix}-STATE-STORE")

    def _check_topic(self, topic: str) -> str:
        if not isinstance(topic, str) or not _TOPIC_RE.match(topic) or topic in (".", ".."):
            raise TopologyError(f"invalid topic name {topic!r}")
        return topic

    # -- graph -----------------------------------------------------------------------------

    def _add(self, node: Node) -> str:
        if node.name in self._nodes:
            raise TopologyError(f"a node named {node.name!r} already exists")
        for parent in node.parents:
            self._nodes[parent].children.append(node.name)
        self._nodes[node.name] = node
        return node.name

    def _node_name(self, prefix: str, name: str | None) -> tuple[str, int]:
        index = self._next_index()
        return name or f"{prefix}-{index:010d}", index

    def _add_processor(
        self, prefix: str, op: Op, parents: list[str], stores: list[str], name: str | None
    ) -> str:
        node_name, index = self._node_name(prefix, name)
        return self._add(
            ProcessorNode(name=node_name, order=index, parents=parents, stores=stores, op=op)
        )

    def _add_source(
        self,
        topics: list[TopicRef],
        key_serde: SerdeRef,
        value_serde: SerdeRef,
        name: str | None = None,
    ) -> str:
        node_name, index = self._node_name("KSTREAM-SOURCE", name)
        return self._add(
            SourceNode(
                name=node_name,
                order=index,
                topics=topics,
                key_serde=key_serde,
                value_serde=value_serde,
            )
        )

    def _add_sink(
        self,
        parent: str,
        topic: TopicRef,
        key_serde: SerdeRef,
        value_serde: SerdeRef,
        *,
        key_required: bool = False,
        name: str | None = None,
    ) -> str:
        node_name, index = self._node_name("KSTREAM-SINK", name)
        return self._add(
            SinkNode(
                name=node_name,
                order=index,
                parents=[parent],
                topic=topic,
                key_serde=key_serde,
                value_serde=value_serde,
                key_required=key_required,
            )
        )

    def _add_store(self, spec: StoreSpec) -> None:
        if spec.name in self._stores:
            raise TopologyError(f"a store named {spec.name!r} already exists")
        if spec.name.startswith(STORE_PREFIX):
            raise TopologyError(f"store names starting with {STORE_PREFIX!r} are reserved")
        self._check_topic(spec.name)  # it becomes part of the changelog topic name
        self._stores[spec.name] = spec

    def _repartition(
        self, parent: str, name: str, key_serde: SerdeRef, value_serde: SerdeRef, *,
        key_required: bool, partitions: int | None = None,
    ) -> str:  # fmt: skip
        """Sink to and source from ``<app>-<name>-repartition`` (``partitions``: its count,
        when set); returns the source node."""
        topic = TopicRef(self._check_topic(name), repartition=True, partitions=partitions)
        if any(isinstance(n, SinkNode) and n.topic == topic for n in self._nodes.values()):
            raise TopologyError(
                f"repartition topic {topic} already exists; give the grouping another name"
            )
        self._add_sink(
            parent,
            topic,
            key_serde,
            value_serde,
            key_required=key_required,
            name=f"{name}-repartition-sink",
        )
        return self._add_source([topic], key_serde, value_serde, name=f"{name}-repartition-source")

    # -- public API ------------------------------------------------------------------------

    def stream(
        self,
        topics: str | Sequence[str],
        key_serde: SerdeRef = "str",
        value_serde: SerdeRef = "json",
        *,
        name: str | None = None,
    ) -> KStream:
        """A stream of one or more topics (several topics are merged by timestamp and must
        be co-partitioned)."""
        names = [topics] if isinstance(topics, str) else list(topics)
        if not names:
            raise TopologyError("stream() needs at least one topic")
        refs = [TopicRef(self._check_topic(t)) for t in names]
        node = self._add_source(refs, key_serde, value_serde, name)
        return KStream(self, node, key_serde, value_serde)

    def table(
        self,
        topic: str,
        materialized: Materialized | str | None = None,
        *,
        key_serde: SerdeRef = "str",
        value_serde: SerdeRef = "json",
        name: str | None = None,
    ) -> KTable:
        """A topic read as a table, materialised in a key-value store (None values delete)."""
        source = self._add_source([TopicRef(self._check_topic(topic))], key_serde, value_serde)
        m = materialized_or_default(materialized)
        spec = m.key_value_spec(m.name or self._store_name(f"{topic}"), key_serde, value_serde)
        self._add_store(spec)
        op = MaterializeOp(spec.name, kind="KTABLE-SOURCE")
        node = self._add_processor(op.kind, op, [source], [spec.name], name)
        return KTable(self, node, spec.key_serde, spec.value_serde, store=spec.name)

    def add_state_store(self, spec: StoreSpec) -> StreamsBuilder:
        """Register a store for custom processors (connect it with ``process(stores=...)``)."""
        if not isinstance(spec, StoreSpec):
            raise TopologyError(f"add_state_store() takes a StoreSpec, got {spec!r}")
        self._add_store(spec)
        return self

    def build(self) -> Topology:
        """Compile the graph built so far (later DSL calls do not change the result)."""
        nodes = {
            name: dataclasses.replace(
                node,
                parents=list(node.parents),
                children=list(node.children),
                stores=list(node.stores),
            )
            for name, node in self._nodes.items()
        }
        return compile_topology(
            nodes,
            dict(self._stores),
            dict(self._buffers),
            self.processing_errors,
        )
