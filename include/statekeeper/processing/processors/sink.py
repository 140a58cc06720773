"""Sink: serialize a record and emit it (with the dedupe headers) to a topic."""

from __future__ import annotations

from typing import Any

from statekeeper.processing.nodes import SinkNode
from statekeeper.processing.processor import Processor, ProcessorContext, Record
from statekeeper.processing.processors.aggregate import check_key
from statekeeper.stores.serdes import BytesSerde, Serde, StringSerde, serde_for


def serializer(serde: Any) -> Any:
    """``serialize`` of a serde: None for raw bytes (no call needed), ``str.encode`` for
    strings (same bytes; a non-str raises TypeError)."""
    resolved: Serde[Any] = serde_for(serde)
    if type(resolved) is BytesSerde:
        return None
    if type(resolved) is StringSerde:
        return str.encode
    return resolved.serialize


class SinkProcessor(Processor):
    """Emits to ``node.topic`` (resolved with the application id); partition by key."""

    def __init__(self, node: SinkNode) -> None:
        self.node = node
        self.key_ser = serializer(node.key_serde)
        self.value_ser = serializer(node.value_serde)
        self.key_required = node.key_required

    def init(self, context: ProcessorContext) -> None:
        self.context = context
        self.topic = self.node.topic.resolve(context.application_id)
        self.emit = context.emit  # type: ignore[attr-defined]

    def process(self, record: Record) -> None:
        key, value = record.key, record.value
        if key is None:
            if self.key_required:
                check_key(key, f"repartition topic {self.topic}")
            key_bytes = None
        else:
            key_bytes = key if self.key_ser is None else self.key_ser(key)
        if value is not None and self.value_ser is not None:
            value = self.value_ser(value)
        self.emit(self.topic, key_bytes, value, record.timestamp, record.headers)
