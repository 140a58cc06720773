"""The ProcessorContext of a running task, and the live nodes it dispatches records through.

Records flow depth-first: ``forward`` hands a record to each child in turn, and the child's
processor runs (and forwards further) before the next child sees it. Outputs and DLQ records
leave through :meth:`TaskContext.emit` / :meth:`TaskContext.dead_letter`, which number them
(``sk.seq``) in emission order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from statekeeper.kafka.model import KafkaRecord
from statekeeper.processing.dlq import error_headers
from statekeeper.processing.errors import TopologyError
from statekeeper.processing.output_headers import PREFIX, SEQ, SOURCE, OutputHeaders, source_ref
from statekeeper.processing.processor import (
    Cancellable,
    Headers,
    Processor,
    ProcessorContext,
    PunctuationType,
    Punctuator,
    Record,
)
from statekeeper.processing.punctuation import Punctuations

Emitter = Any  # has send(topic, key, value, headers, timestamp_ms=None, partition=None)


class BatchCounters:
    """Per-batch counts reported in the TaskBatchResult."""

    __slots__ = ("output", "dlq", "late", "dropped")

    def __init__(self) -> None:
        self.output = 0
        self.dlq = 0
        self.late = 0
        self.dropped = 0


class RuntimeNode:
    """A node of a live task: its processor, children and connected stores."""

    __slots__ = ("name", "processor", "children", "by_name", "stores", "ctx")

    def __init__(
        self, name: str, processor: Processor | None, stores: list[str], ctx: TaskContext
    ) -> None:
        self.name = name
        self.processor = processor
        self.children: list[RuntimeNode] = []
        self.by_name: dict[str, RuntimeNode] = {}
        self.stores = frozenset(stores)
        self.ctx = ctx

    def add_child(self, child: RuntimeNode) -> None:
        self.children.append(child)
        self.by_name[child.name] = child

    def process(self, record: Record) -> None:
        ctx = self.ctx
        previous = ctx._node
        ctx._node = self
        try:
            self.processor.process(record)  # type: ignore[union-attr]
        finally:
            ctx._node = previous


class TaskContext(ProcessorContext):
    """Context shared by all processors of one task (see ProcessorContext for the API)."""

    def __init__(
        self,
        *,
        application_id: str,
        task_id: str,
        partition: int,
        stores: dict[str, Any],
        emitter: Emitter,
        dlq_topic: str,
        punctuations: Punctuations,
        stream_time: int,
        epoch: int = 0,
    ) -> None:
        self.application_id = application_id
        self.epoch = epoch  # stamped on every record the task emits (docs/fencing.md)
        self.task_id = task_id
        self.partition = partition
        self._stores = stores
        self._send = emitter.send
        self._dlq_topic = dlq_topic
        self._punctuations = punctuations
        self._node: RuntimeNode | None = None
        self._source: KafkaRecord | None = None
        self._ref_record: KafkaRecord | None = None
        self._ref = b""
        self._timestamp = -1
        self._stream_time = stream_time
        self._wall_clock = -1
        self._headers = OutputHeaders(application_id, task_id, -1)
        self._listeners: list[tuple[RuntimeNode, Callable[[int], None]]] = []
        self.counters = BatchCounters()

    # -- batch lifecycle (driven by StreamTask) --------------------------------------------

    def begin_batch(self, batch_id: int, batch_time_ms: int) -> None:
        self._headers = OutputHeaders(self.application_id, self.task_id, batch_id, self.epoch)
        self._wall_clock = batch_time_ms
        self.counters = BatchCounters()
        self._source = None

    # -- ProcessorContext ------------------------------------------------------------------

    @property
    def topic(self) -> str | None:
        return None if self._source is None else self._source.topic

    @property
    def offset(self) -> int | None:
        return None if self._source is None else self._source.offset

    @property
    def headers(self) -> Headers:
        return () if self._source is None else self._source.headers

    @property
    def timestamp(self) -> int:
        return self._timestamp

    @property
    def stream_time(self) -> int:
        return self._stream_time

    @property
    def wall_clock_time(self) -> int:
        return self._wall_clock

    def get_state_store(self, name: str) -> Any:
        node = self._node
        if node is None or name not in node.stores:
            where = "outside a processor" if node is None else f"processor {node.name}"
            connected = [] if node is None else sorted(node.stores)
            raise TopologyError(
                f"store {name!r} is not connected to {where} (connected: {connected}); "
                "pass it in KStream.process(..., stores=[...])"
            )
        return self._stores[name]

    def forward(self, record: Record, to: str | None = None) -> None:
        node = self._node
        if node is None:
            raise TopologyError("forward() called outside a processor")
        if to is None:
            for child in node.children:
                child.process(record)
            return
        child = node.by_name.get(to)
        if child is None:
            raise TopologyError(
                f"processor {node.name} has no child {to!r}; children: {list(node.by_name)}"
            )
        child.process(record)

    def schedule(
        self, interval_ms: int, punctuation_type: PunctuationType, callback: Punctuator
    ) -> Cancellable:
        if self._node is None:
            raise TopologyError("schedule() called outside a processor")
        return self._punctuations.add(self._node, interval_ms, punctuation_type, callback)

    # -- internal API of DSL processors ----------------------------------------------------

    def on_stream_time_advance(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(stream_time)`` after every record that advances stream time."""
        assert self._node is not None
        self._listeners.append((self._node, callback))

    def count_dropped(self, n: int = 1) -> None:
        self.counters.dropped += n

    def count_late(self, n: int = 1) -> None:
        self.counters.late += n

    def run_at(self, node: RuntimeNode, callback: Callable[[int], None], timestamp: int) -> None:
        """Run a punctuation or stream-time callback as ``node``."""
        previous_node, previous_ts = self._node, self._timestamp
        self._node, self._timestamp = node, timestamp
        try:
            callback(timestamp)
        finally:
            self._node, self._timestamp = previous_node, previous_ts

    # -- output ----------------------------------------------------------------------------

    def _source_ref(self) -> bytes:
        source = self._source
        if source is not self._ref_record:
            self._ref_record = source
            self._ref = (
                b"punctuation"
                if source is None
                else source_ref(source.topic, source.partition, source.offset)
            )
        return self._ref

    def emit(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        extra_headers: Headers = (),
    ) -> None:
        """Send one output record (partition chosen by the emitter from the key)."""
        headers = self._headers.next(self._source_ref(), extra_headers)
        self._send(topic, key, value, headers, timestamp if timestamp >= 0 else None, None)
        self.counters.output += 1

    def emit_rows(
        self,
        topic: str,
        keys: list[bytes | None],
        values: list[bytes | None],
        sources: list[int] | range,
        records: Sequence[KafkaRecord],
        refs: list[bytes] | None,
    ) -> None:
        """Batch-path emit: row i is ``keys[i]``/``values[i]`` from input record
        ``records[sources[i]]``; ``refs`` (per input record) are the ``sk.source`` values,
        computed here when None. Same headers and numbering as :meth:`emit`."""
        headers_builder = self._headers
        app, task, batch = headers_builder.fixed
        epoch = headers_builder.epoch
        seq = headers_builder.seq
        send = self._send
        prefix = b""
        if refs is None and records:
            first = records[0]
            prefix = b"%s:%d:" % (first.topic.encode(), first.partition)
        for key, value, i in zip(keys, values, sources, strict=True):
            record = records[i]
            ref = refs[i] if refs is not None else prefix + b"%d" % record.offset
            headers = [app, task, batch, (SEQ, b"%d" % seq), (SOURCE, ref)]
            if epoch is not None:
                headers.append(epoch)
            if record.headers:
                headers.extend(h for h in record.headers if not h[0].startswith(PREFIX))
            send(topic, key, value, headers, record.timestamp_ms, None)
            seq += 1
        self.counters.output += seq - headers_builder.seq
        headers_builder.seq = seq

    def dead_letter(self, record: KafkaRecord, error_type: str, exc: BaseException) -> None:
        """Send the original bytes of ``record`` to the DLQ with the error headers."""
        ref = source_ref(record.topic, record.partition, record.offset)
        headers = self._headers.next(ref, record.headers)
        headers.extend(error_headers(error_type, exc))
        ts = record.timestamp_ms if record.timestamp_ms >= 0 else None
        self._send(self._dlq_topic, record.key, record.value, headers, ts, None)
        self.counters.dlq += 1
