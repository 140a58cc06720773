"""Running one task's topology in batch over given input records, in a sandbox.

Fresh stores in a scratch directory with logging disabled (no changelog, no producer: a
read-only state environment that never touches the broker), every record through
:class:`~statekeeper.processing.stream_task.StreamTask` one at a time (``vectorize=False``:
the result does not depend on how a stream cut its micro-batches), outputs and dead letters
counted and dropped. What a drill recomputes a store with, and what a store backfill fills
a new store from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from statekeeper.kafka.model import KafkaRecord
from statekeeper.processing.stream_task import StreamTask
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.environment import StateEnvironment

T = TypeVar("T")


class DiscardingEmitter:
    """Takes a stream task's outputs (and dead letters) and only counts them."""

    def __init__(self) -> None:
        self.sent = 0

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Any = None,
        timestamp_ms: int | None = None,
        partition: int | None = None,
    ) -> None:
        self.sent += 1


def run_in_sandbox(
    settings: StatekeeperSettings,
    topology: Any,
    task_id: str,
    subtopology: int,
    partition: int,
    specs: Sequence[Any],
    records: Mapping[str, Sequence[KafkaRecord]],
    sandbox: Path,
    read: Callable[[Any], T],
    *,
    batch_id: int = 0,
    emitter: Any = None,
) -> T:
    """Process ``records`` (``topic:partition`` -> records in offset order) as task
    ``task_id`` into fresh unlogged copies of ``specs`` under ``sandbox``; ``read(state)``
    (the opened task state, before it closes) gives the result. ``emitter``: what takes the
    task's outputs (default: a :class:`DiscardingEmitter`)."""
    batch_time = max((r[-1].timestamp_ms for r in records.values() if r), default=0)
    unlogged = [dataclasses.replace(s, logging_enabled=False) for s in specs]
    fresh = settings.model_copy(update={"state_dir": Path(sandbox)})
    env = StateEnvironment(fresh, read_only=True, check_broker=False)
    try:
        state = env.task(task_id, partition, unlogged)
        state.open()
        try:
            stream = StreamTask(
                topology,
                subtopology,
                partition,
                state,
                emitter if emitter is not None else DiscardingEmitter(),
                settings.application_id,
                vectorize=False,
            )
            stream.process_batch(batch_id, batch_time, records)
            stream.close()
            return read(state)
        finally:
            state.close()
    finally:
        env.close()
