"""StreamTask: runs one task's micro-batch through its subtopology.

1. Skip records below the state's processed offsets (already committed) and, on
   repartition topics, duplicates of records already applied (by their ``sk.*`` headers).
2. Process: a linear source → stateless → [aggregate] → [sink] chain of one input runs
   vectorised over the whole batch; anything else runs record at a time, depth-first, with
   the inputs merged by timestamp. Bad records go to the DLQ and processing continues.
3. Fire wall-clock punctuations due at the batch time.
4. Persist stream time, punctuation schedules and dedupe positions in the task-state store.

The task never commits: the runner flushes the emitter, then calls
``state.commit(batch_id, source_offsets)``. Processing is deterministic for a given input,
state and ``batch_time_ms`` (invariant 2, docs/invariants.md), outputs included (``sk.seq``).
After a failed batch, reopen the state and build a new StreamTask.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from statekeeper.kafka.model import KafkaRecord
from statekeeper.kafka.partitioning import partition_for_key
from statekeeper.processing.dlq import DESERIALIZATION, classify, dlq_topic, is_fatal
from statekeeper.processing.errors import TopologyError
from statekeeper.processing.nodes import ProcessorNode, SinkNode, SourceNode
from statekeeper.processing.output_headers import dedupe_id
from statekeeper.processing.processor import PunctuationType, Record
from statekeeper.processing.processors.sink import SinkProcessor
from statekeeper.processing.processors.suppress import SuppressionBuffer
from statekeeper.processing.punctuation import Punctuations
from statekeeper.processing.record_order import merge_by_timestamp, unprocessed
from statekeeper.processing.repartition_dedupe import RepartitionDedupe, scoped_topic
from statekeeper.processing.task_context import RuntimeNode, TaskContext
from statekeeper.processing.task_state_store import TaskState
from statekeeper.processing.topology import CarriedInput, Topology, task_id
from statekeeper.processing.vectorized import VectorizedChain, deserializer
from statekeeper.stores.serdes import serde_for


@dataclass
class TaskBatchResult:
    """What one task did in one batch."""

    task_id: str
    batch_id: int
    records_read: int = 0
    records_processed: int = 0
    records_skipped: int = 0  # below the processed offsets, or repartition duplicates
    records_deduplicated: int = 0  # the repartition duplicates among the skipped
    records_fenced: int = 0  # repartition records of a superseded upstream epoch, dropped
    records_late_dropped: int = 0
    records_dropped: int = 0  # null values reaching an aggregation
    records_dlq: int = 0
    records_output: int = 0
    punctuations: int = 0
    stream_time: int = -1
    elapsed: float = 0.0
    vectorized: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Source:
    __slots__ = ("topic", "repartition", "key_de", "value_de", "node")

    def __init__(self, topic: str, repartition: bool, node: SourceNode, rt: RuntimeNode):
        self.topic = topic
        self.repartition = repartition
        self.key_de = deserializer(node.key_serde)
        self.value_de = deserializer(node.value_serde)
        self.node = rt


def _routed_to(
    records: Sequence[KafkaRecord], partition: int, partitions: int, old_partition: int
) -> list[KafkaRecord]:
    """The records whose key the new task ``partition`` (of ``partitions``) holds, as its
    repartition topic routes keys (a record without a key: by its old partition)."""
    return [
        r
        for r in records
        if (old_partition % partitions if r.key is None else partition_for_key(r.key, partitions))
        == partition
    ]


def _of_committed_batches(records: Sequence[KafkaRecord], max_batch: int) -> list[KafkaRecord]:
    """The records an old version's committed micro-batches (``sk.batch`` <= ``max_batch``)
    wrote: later ones come from source records the new version reads itself."""
    kept = []
    for record in records:
        found = dedupe_id(record.headers)
        if found is None or found[1] <= max_batch:
            kept.append(record)
    return kept


class StreamTask:
    """One task (``<subtopology>_<partition>``) of a topology, bound to its state.

    ``state`` has ``.store(name)`` and ``.processed_offsets`` (a TaskStateManager);
    ``emitter`` has ``send(topic, key, value, headers, timestamp_ms=None, partition=None)``.
    """

    def __init__(
        self,
        topology: Topology,
        subtopology_id: int,
        partition: int,
        state: Any,
        emitter: Any,
        application_id: str,
        *,
        vectorize: bool = True,
    ) -> None:
        sub = topology.subtopology(subtopology_id)
        self.topology = topology
        self.subtopology = sub
        self.partition = partition
        self.application_id = application_id
        self.task_id = task_id(sub.id, partition)
        self.state = state
        self._fail = topology.processing_errors == "fail"
        stores: dict[str, Any] = {}
        for name in sub.stores:
            store = state.store(name)
            info = topology.buffers.get(name)
            if info is not None:
                store = SuppressionBuffer(
                    store, serde_for(info.key_serde), serde_for(info.value_serde)
                )
            stores[name] = store
        self.stores = stores
        self._task_state = TaskState(
            state.store(sub.task_state_store) if sub.task_state_store else None
        )
        self._dedupe = RepartitionDedupe(self._task_state.dedupe)
        self._punctuations = Punctuations(self._task_state.punctuations)
        self._ctx = TaskContext(
            application_id=application_id,
            task_id=self.task_id,
            partition=partition,
            stores=stores,
            emitter=emitter,
            dlq_topic=dlq_topic(application_id),
            punctuations=self._punctuations,
            stream_time=self._task_state.stream_time,
            epoch=getattr(state, "epoch", 0),
        )
        self._runtime = self._build_nodes()
        self._sources: dict[str, _Source] = {}
        source_nodes: dict[str, tuple[SourceNode, RuntimeNode]] = {}
        for name in sub.sources:
            node = topology.nodes[name]
            assert isinstance(node, SourceNode)
            for ref in node.topics:
                topic = ref.resolve(application_id)
                self._sources[topic] = _Source(topic, ref.repartition, node, self._runtime[name])
                source_nodes[topic] = (node, self._runtime[name])
        # A new version taking over reads an old version's repartition topic once, into the
        # source node of its own (statekeeper.versions.takeover).
        self._carried: dict[str, CarriedInput] = {}
        for old_topic, carried in getattr(topology, "carried_inputs", {}).items():
            if carried.new_topic in source_nodes:
                node, rt = source_nodes[carried.new_topic]
                self._sources[old_topic] = _Source(old_topic, True, node, rt)
                self._carried[old_topic] = carried
        self._vector: VectorizedChain | None = None
        if vectorize and sub.vector_chain:
            chain = [topology.nodes[n] for n in sub.vector_chain]
            self._vector = VectorizedChain(chain, stores, self._ctx, self._fail)
        else:
            self._init_processors()

    # -- construction ----------------------------------------------------------------------

    def _build_nodes(self) -> dict[str, RuntimeNode]:
        nodes = self.topology.nodes
        runtime: dict[str, RuntimeNode] = {}
        for name in self.subtopology.nodes:
            node = nodes[name]
            processor: Any = None
            if isinstance(node, ProcessorNode):
                processor = node.op.create()
            elif isinstance(node, SinkNode):
                processor = SinkProcessor(node)
            runtime[name] = RuntimeNode(name, processor, node.stores, self._ctx)
        for name in self.subtopology.nodes:
            for child in nodes[name].children:
                runtime[name].add_child(runtime[child])
        return runtime

    def _init_processors(self) -> None:
        ctx = self._ctx
        for name in self.subtopology.nodes:
            rt = self._runtime[name]
            if rt.processor is None:
                continue
            ctx._node = rt
            try:
                rt.processor.init(ctx)
            finally:
                ctx._node = None

    # -- processing ------------------------------------------------------------------------

    def process_batch(
        self, batch_id: int, batch_time_ms: int, records: Mapping[str, Sequence[KafkaRecord]]
    ) -> TaskBatchResult:
        """Process one micro-batch (``records`` keyed by ``topic:partition``, each in offset
        order: a list, or a ConsumedRun that the vectorised path reads as columns)."""
        started = time.perf_counter()
        ctx = self._ctx
        ctx.begin_batch(batch_id, batch_time_ms)
        result = TaskBatchResult(self.task_id, batch_id, vectorized=self._vector is not None)
        processed_offsets = self.state.processed_offsets
        lists: list[Sequence[KafkaRecord]] = []
        for tp, recs in records.items():
            source = self._source_for(tp)
            result.records_read += len(recs)
            todo = unprocessed(recs, processed_offsets.get(tp))
            result.records_skipped += len(recs) - len(todo)
            dedupe_topic = source.topic
            carried = self._carried.get(source.topic)
            if carried is not None and todo:
                before = len(todo)
                todo = _of_committed_batches(todo, carried.max_batch)
                if carried.partitions is not None:  # re-keyed: this task's keys only
                    old_partition = int(tp.rpartition(":")[2])
                    todo = _routed_to(todo, self.partition, carried.partitions, old_partition)
                    dedupe_topic = scoped_topic(source.topic, old_partition)
                result.records_skipped += before - len(todo)
            if source.repartition and todo:
                fenced_before = self._dedupe.fenced
                todo, duplicates = self._dedupe.filter(dedupe_topic, todo)
                result.records_fenced += self._dedupe.fenced - fenced_before
                result.records_deduplicated += duplicates
                result.records_skipped += duplicates
            if todo:
                # Taking over, an old repartition topic's records go first (they are older).
                if source.topic in self._carried:
                    lists.insert(0, todo)
                else:
                    lists.append(todo)

        if self._vector is not None:
            if len(lists) > 1 and not self._carried:
                raise TopologyError(f"task {self.task_id}: a linear chain reads one partition")
            processed = 0
            for todo in lists or [[]]:
                count, batch_stream_time = self._vector.run(todo)
                processed += count
                if batch_stream_time > ctx._stream_time:
                    ctx._stream_time = batch_stream_time
        else:
            processed = self._run_records(merge_by_timestamp(lists))

        ctx._source = None
        self._punctuations.anchor_wall_clock(batch_time_ms)
        result.punctuations = self._punctuations.fire(
            PunctuationType.WALL_CLOCK_TIME, batch_time_ms, ctx.run_at
        )
        self._task_state.stream_time = ctx._stream_time
        self._task_state.punctuations = self._punctuations.next_times()
        self._task_state.save()

        counters = ctx.counters
        result.records_processed = processed
        result.records_dlq = counters.dlq
        result.records_output = counters.output
        result.records_late_dropped = counters.late
        result.records_dropped = counters.dropped
        result.stream_time = ctx._stream_time
        result.elapsed = time.perf_counter() - started
        return result

    def _fanned_out(self, topic: str) -> bool:
        carried = self._carried.get(topic)
        return carried is not None and carried.partitions is not None

    def _source_for(self, tp: str) -> _Source:
        topic, _, partition = tp.rpartition(":")
        source = self._sources.get(topic)
        fanned_out = source is not None and self._fanned_out(topic)
        if source is None or (partition != str(self.partition) and not fanned_out):
            raise TopologyError(
                f"task {self.task_id} got records of {tp!r}; it reads partition "
                f"{self.partition} of {sorted(self._sources)}"
            )
        return source

    def _run_records(self, records: Any) -> int:
        ctx = self._ctx
        sources = self._sources
        punctuations = self._punctuations
        listeners = ctx._listeners
        fail = self._fail
        stream_time = ctx._stream_time
        processed = 0
        stream_kind = PunctuationType.STREAM_TIME
        for rec in records:
            source = sources[rec.topic]
            ctx._source = rec
            ctx._timestamp = ts = rec.timestamp_ms
            key, value = rec.key, rec.value
            try:
                if key is not None and source.key_de is not None:
                    key = source.key_de(key)
                if value is not None and source.value_de is not None:
                    value = source.value_de(value)
            except Exception as exc:
                ctx.dead_letter(rec, DESERIALIZATION, exc)
                continue
            record = Record(key, value, ts, rec.headers)
            node = source.node
            ctx._node = node
            try:
                for child in node.children:
                    child.process(record)
            except Exception as exc:
                if fail or is_fatal(exc):
                    raise
                ctx.dead_letter(rec, classify(exc), exc)
                continue
            finally:
                ctx._node = None
            processed += 1
            if ts > stream_time:
                stream_time = ctx._stream_time = ts
                for listener_node, callback in listeners:
                    ctx.run_at(listener_node, callback, ts)
                if punctuations:
                    punctuations.fire(stream_kind, ts, ctx.run_at)
        return processed

    def close(self) -> None:
        """Close the processors (the stores belong to the state manager)."""
        ctx = self._ctx
        for name in self.subtopology.nodes:
            rt = self._runtime[name]
            if rt.processor is not None and self._vector is None:
                ctx._node = rt
                try:
                    rt.processor.close()
                finally:
                    ctx._node = None
