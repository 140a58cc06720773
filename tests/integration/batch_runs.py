"""Running a two-partition app's tasks batch by batch without Spark: what the drill, the
operator-read and the custom-store tests build their committed state (and app spec) with."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.model import OffsetRange, tp_key
from statekeeper.kafka.range_reader import read_ranges
from statekeeper.processing.output_producer import OutputProducer
from statekeeper.processing.stream_task import StreamTask
from statekeeper.snapshots import SnapshotStorage, snapshot_task
from statekeeper.state.environment import StateEnvironment

TIMEOUT = 30


def write_app_spec(
    root: Path, app_id: str, source: str, bootstrap: str, topology_file: str, extra: str = ""
) -> Path:
    """``root/<app_id>.yaml`` naming ``root/topo.py`` (``topology_file``'s text, its
    ``build(input_topic)``), reading ``source``, its state under ``root/state``; ``extra``
    continues the settings mapping (``", snapshot_url: '...'"``)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "topo.py").write_text(topology_file)
    spec = root / f"{app_id}.yaml"
    spec.write_text(
        f"application_id: {app_id}\ntopology: topo.py:build\n"
        f"params: {{input_topic: {source}}}\n"
        f"settings: {{bootstrap_servers: '{bootstrap}', state_dir: '{root / 'state'}'{extra}}}\n"
    )
    return spec


def produce_user_records(bootstrap: str, source: str, records: int, users: int) -> None:
    """``records`` records keyed ``user-<i % users>``, alternating partitions 0 and 1, with
    timestamps 1,000 + 100 i."""
    producer = Producer(producer_config(bootstrap))
    for i in range(records):
        key = f"user-{i % users}"
        producer.produce(source, b"x", key.encode(), partition=i % 2, timestamp=1_000 + 100 * i)
    assert producer.flush(TIMEOUT) == 0


def run_batches(
    settings: Any,
    topology: Any,
    source: str,
    batches: list[tuple[int, int]],
    storage: SnapshotStorage,
    staging: Path,
    after_commit: Callable[[Any, int], None] | None = None,
) -> None:
    """Run subtopology 0's tasks of partitions 0 and 1 through ``batches`` (source offset
    ranges per partition), each committed; each task is snapshotted after batch 0 and
    ``after_commit(task, batch)`` runs after every commit."""
    app_id = settings.application_id
    specs = topology.store_specs(0)
    env = StateEnvironment(settings)
    env.ensure_changelogs(specs, 2)
    outputs = OutputProducer(settings.bootstrap_servers)
    conf = consumer_config(settings.bootstrap_servers)
    try:
        for p in (0, 1):
            with env.task(f"0_{p}", p, specs) as task:
                for batch, (start, end) in enumerate(batches):
                    records = read_ranges(conf, [OffsetRange(source, p, start, end)], TIMEOUT)
                    StreamTask(topology, 0, p, task, outputs, app_id).process_batch(
                        batch, 1_000_000 + batch, records
                    )
                    outputs.flush(TIMEOUT)
                    task.commit(batch, {tp_key(source, p): end})
                    if batch == 0:
                        snapshot_task(task, storage, staging)
                    if after_commit is not None:
                        after_commit(task, batch)
    finally:
        outputs.close()
        env.close()
