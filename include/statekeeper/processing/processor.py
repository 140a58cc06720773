"""The Processor API: records, processors, and the context a processor runs in.

Mirrors Kafka Streams' ``org.apache.kafka.streams.processor.api``: a :class:`Processor` is
initialised with a :class:`ProcessorContext`, receives one :class:`Record` at a time in
:meth:`Processor.process`, reads and writes the stores it is connected to, forwards records
to its children and may schedule punctuations (stream time or wall-clock time).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

Headers = tuple[tuple[str, bytes | None], ...]
Punctuator = Callable[[int], None]


class Record:
    """One record flowing through a topology: deserialized key and value, timestamp (ms),
    headers. Treat it as immutable; ``with_*`` return modified copies."""

    __slots__ = ("key", "value", "timestamp", "headers")

    def __init__(self, key: Any, value: Any, timestamp: int, headers: Headers = ()) -> None:
        self.key = key
        self.value = value
        self.timestamp = timestamp
        self.headers = headers

    def with_key(self, key: Any) -> Record:
        return Record(key, self.value, self.timestamp, self.headers)

    def with_value(self, value: Any) -> Record:
        return Record(self.key, value, self.timestamp, self.headers)

    def with_timestamp(self, timestamp: int) -> Record:
        return Record(self.key, self.value, timestamp, self.headers)

    def with_headers(self, headers: Headers) -> Record:
        return Record(self.key, self.value, self.timestamp, tuple(headers))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        return (self.key, self.value, self.timestamp, self.headers) == (
            other.key,
            other.value,
            other.timestamp,
            other.headers,
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Record(key={self.key!r}, value={self.value!r}, timestamp={self.timestamp})"


class PunctuationType(enum.Enum):
    """What drives a punctuation: the task's stream time, or the batch's wall-clock time."""

    STREAM_TIME = "stream_time"
    WALL_CLOCK_TIME = "wall_clock_time"


class Cancellable(ABC):
    """Handle of a scheduled punctuation."""

    @abstractmethod
    def cancel(self) -> None: ...


class ProcessorContext(ABC):
    """What a processor sees of its task.

    ``stream_time`` is the largest timestamp of the valid records the task has processed
    (before the current one); ``wall_clock_time`` is the micro-batch's time, identical when a
    batch is re-run (invariant 2, docs/invariants.md). Both survive restarts.
    """

    application_id: str
    task_id: str
    partition: int

    @property
    @abstractmethod
    def topic(self) -> str | None:
        """Topic of the input record being processed (None inside a punctuation)."""

    @property
    @abstractmethod
    def offset(self) -> int | None:
        """Offset of the input record being processed (None inside a punctuation)."""

    @property
    @abstractmethod
    def timestamp(self) -> int:
        """Timestamp of the input record being processed (the punctuation time inside one)."""

    @property
    @abstractmethod
    def stream_time(self) -> int:
        """Max timestamp of the valid records processed so far; -1 before the first."""

    @property
    @abstractmethod
    def wall_clock_time(self) -> int:
        """The micro-batch time (ms) given to ``process_batch``."""

    @abstractmethod
    def get_state_store(self, name: str) -> Any:
        """A store connected to this processor: KeyValueStore, WindowStore or a
        SuppressionBuffer."""

    @abstractmethod
    def forward(self, record: Record, to: str | None = None) -> None:
        """Send ``record`` to every child, or only to the child named ``to``."""

    @abstractmethod
    def schedule(
        self, interval_ms: int, punctuation_type: PunctuationType, callback: Punctuator
    ) -> Cancellable:
        """Call ``callback(timestamp)`` every ``interval_ms`` of stream or wall-clock time.

        Stream-time punctuations are aligned to multiples of the interval and fire as soon as
        stream time reaches them (once, however far it jumped); wall-clock punctuations fire
        at the end of a batch whose time reached them. Schedules are persisted per task, so
        they continue after a restart; schedule them in ``init`` in a fixed order.
        """


class Processor:
    """Base class of custom processors (``KStream.process(MyProcessor, stores=[...])``)."""

    context: ProcessorContext

    def init(self, context: ProcessorContext) -> None:
        self.context = context

    def process(self, record: Record) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Called when the task is closed."""


ProcessorSupplier = Callable[[], Processor]
