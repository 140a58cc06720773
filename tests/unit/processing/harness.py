"""Test harness for stream tasks without a broker: real stores (RocksDB / in-memory) built
from the topology's specs, a state object with ``.store()``/``.processed_offsets``/commit,
and an emitter that collects what would be produced."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.kafka.model import KafkaRecord, tp_key
from statekeeper.processing.stream_task import StreamTask, TaskBatchResult
from statekeeper.processing.topology import Topology
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import build_store
from statekeeper.stores.typed import WindowStore

APP = "app"


@dataclass
class Sent:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp_ms: int | None
    partition: int | None

    @property
    def header(self) -> dict[str, bytes | None]:
        return dict(self.headers)

    @property
    def dedupe_id(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        h = self.header
        return h["sk.task"], h["sk.batch"], h["sk.seq"]

    def as_record(self, partition: int, offset: int) -> KafkaRecord:
        """What a consumer of ``self.topic`` would read."""
        return KafkaRecord(
            self.topic,
            partition,
            offset,
            self.timestamp_ms or 0,
            self.key,
            self.value,
            tuple(self.headers),
        )


@dataclass
class ListEmitter:
    sent: list[Sent] = field(default_factory=list)

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]],
        timestamp_ms: int | None = None,
        partition: int | None = None,
    ) -> None:
        self.sent.append(Sent(topic, key, value, list(headers), timestamp_ms, partition))

    def to(self, topic: str) -> list[Sent]:
        return [s for s in self.sent if s.topic == topic]

    def kv(self, topic: str, decode: Any = None) -> list[tuple[Any, Any]]:
        """(key, value) pairs sent to ``topic``; utf-8 keys, values decoded by ``decode``."""
        out = []
        for s in self.to(topic):
            key = s.key.decode() if s.key is not None else None
            value = s.value
            if value is not None and decode is not None:
                value = decode(value)
            out.append((key, value))
        return out

    def clear(self) -> None:
        self.sent.clear()


def as_json(data: bytes) -> Any:
    return json.loads(data)


class FakeState:
    """The part of TaskStateManager a StreamTask uses, over real stores, without changelogs.

    ``commit`` makes staged RocksDB writes durable with the source offsets; ``reopen``
    simulates a restart (uncommitted writes of persistent stores are lost; in-memory stores
    are rebuilt empty, so tests of restarts use RocksDB stores)."""

    def __init__(self, topology: Topology, subtopology: int, directory: Path) -> None:
        self.specs = topology.store_specs(subtopology)
        self.directory = directory
        self.processed_offsets: dict[str, int] = {}
        self._open()

    def _open(self) -> None:
        self.stores = {s.name: build_store(s, self.directory / s.name, None) for s in self.specs}
        meta = [s.read_metadata() for s in self.stores.values()]
        self.processed_offsets = dict(meta[0].source_offsets) if meta else {}

    def store(self, name: str) -> Any:
        return self.stores[name]

    def commit(self, batch_id: int, source_offsets: dict[str, int]) -> None:
        for store in self.stores.values():
            store.flush()
            store.commit(StoreMetadata(None, batch_id, dict(source_offsets)))
        self.processed_offsets = dict(source_offsets)

    def reopen(self) -> None:
        for store in self.stores.values():
            store.close()
        self._open()

    def close(self) -> None:
        for store in self.stores.values():
            store.close()

    def contents(self, name: str) -> dict[Any, Any]:
        store = self.stores[name]
        if isinstance(store, WindowStore):
            return {(k, s): v for k, s, v in store.all()}
        return dict(store.all())


def records(
    topic: str,
    items: list[tuple[Any, Any, int]],
    *,
    partition: int = 0,
    start_offset: int = 0,
    encode_key: Any = None,
    encode_value: Any = None,
) -> list[KafkaRecord]:
    """KafkaRecords from ``(key, value, timestamp)``; str is utf-8 encoded, dict/list → JSON."""

    def enc(x: Any, custom: Any) -> bytes | None:
        if custom is not None:
            return custom(x)
        if x is None or isinstance(x, bytes):
            return x
        if isinstance(x, str):
            return x.encode()
        return json.dumps(x).encode()

    return [
        KafkaRecord(
            topic, partition, start_offset + i, ts, enc(k, encode_key), enc(v, encode_value)
        )
        for i, (k, v, ts) in enumerate(items)
    ]


class Harness:
    """One task of a topology, with its fake state and emitter, driven batch by batch."""

    def __init__(
        self,
        topology: Topology,
        directory: Path,
        *,
        subtopology: int = 0,
        partition: int = 0,
        vectorize: bool = True,
    ) -> None:
        self.topology = topology
        self.subtopology = subtopology
        self.partition = partition
        self.vectorize = vectorize
        self.state = FakeState(topology, subtopology, directory)
        self.emitter = ListEmitter()
        self.batch_id = 0
        self.task = self._task()

    def _task(self) -> StreamTask:
        return StreamTask(
            self.topology,
            self.subtopology,
            self.partition,
            self.state,
            self.emitter,
            APP,
            vectorize=self.vectorize,
        )

    def run(
        self,
        batch: list[KafkaRecord],
        *,
        batch_time_ms: int = 0,
        commit: bool = True,
        batch_id: int | None = None,
    ) -> TaskBatchResult:
        """Process ``batch`` (grouped per topic-partition) and commit like the runner does."""
        grouped: dict[str, list[KafkaRecord]] = {}
        for rec in batch:
            grouped.setdefault(tp_key(rec.topic, rec.partition), []).append(rec)
        if batch_id is None:
            self.batch_id += 1
            batch_id = self.batch_id
        result = self.task.process_batch(batch_id, batch_time_ms, grouped)
        if commit:
            offsets = dict(self.state.processed_offsets)
            for tp, recs in grouped.items():
                offsets[tp] = max(offsets.get(tp, 0), recs[-1].offset + 1)
            self.state.commit(batch_id, offsets)
        return result

    def restart(self) -> None:
        """Drop uncommitted work, reopen the stores, build a new task."""
        self.task.close()
        self.state.reopen()
        self.task = self._task()

    def contents(self, store: str) -> dict[Any, Any]:
        return self.state.contents(store)

    def close(self) -> None:
        self.task.close()
        self.state.close()
