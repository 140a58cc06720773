"""Optional check (``drill --spark``): an app's PySpark SQL recomputation, where one maps
cleanly onto a store, diffed with the restored store task by task.

A :class:`SparkStoreModel` (what the function the spec's ``drill_model:`` names returns, e.g.
``spark_apps/<app>/drill_model.py``) names a store, the external
input topics its recomputation reads, and a function from the records of those inputs (it
builds its DataFrame with the JVM Kafka source's columns) to the store's expected contents,
decoded. For each restored
task the inputs are bounded where the task's state stopped:

- a task reading an input directly: up to the source offsets of its restored marker;
- a task reading a repartition topic: up to the input offsets named by the ``sk.source``
  headers of the repartition records below its restored offset (a task of the upstream
  subtopology emits in input order), and only the keys the repartition topic routes to this
  task's partition are expected.
- a task of an app that took over from an older version (its state migrated: the state
  root's ``takeover.json``): the older version's repartition topics its migrated markers
  still name bound it too, the same way (their records below the marker; those the takeover
  dropped aside: of the old version's micro-batches after ``max_batch``, from the carried
  range's start on), so the recomputation covers the input the old version counted into the
  migrated state. An old topic deleted since is left out.

The expected contents are encoded with the store's serdes and compared key by key, or, with
the model's ``agrees``, decoded and judged by it (a model that checks part of a value); a
store that differs shows up to 20 keys with their restored, recomputed and live values.
pyspark is imported here, lazily.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.admin import make_admin, partition_count
from statekeeper.kafka.model import KafkaRecord, OffsetRange, tp_key
from statekeeper.kafka.offsets import log_end_offsets, log_start_offsets
from statekeeper.kafka.partitioning import partition_for_key
from statekeeper.kafka.range_reader import read_ranges
from statekeeper.ops.drill.contents import Contents, diff_contents, diff_result, live_values
from statekeeper.ops.drill.record import SKIPPED, CheckResult
from statekeeper.ops.drill.sandbox import RestoredTask
from statekeeper.processing.output_headers import SOURCE, dedupe_id
from statekeeper.settings import StatekeeperSettings
from statekeeper.stores.builders import StoreSpec
from statekeeper.stores.serdes import serde_for
from statekeeper.stores.window_bytes import changelog_window_key


@dataclass(frozen=True)
class SparkStoreModel:
    """A Spark recomputation of one store: ``expected(spark, records)`` returns
    ``{key: value}`` (window stores: ``{(key, window start): value}``), decoded, for records
    of the ``inputs`` topics (the model builds its DataFrame, e.g. with
    ``statekeeper.recompute.spark_frames.records_to_dataframe``)."""

    store: str
    inputs: tuple[str, ...]
    expected: Callable[[Any, list[KafkaRecord]], dict[Any, Any]]
    name: str = "PySpark SQL recomputation"
    #: ``agrees(expected, restored) -> bool`` on decoded values, for a model that checks
    #: only part of a value; None: the encoded values must be equal.
    agrees: Callable[[Any, Any], bool] | None = None


def encode(spec: StoreSpec, expected: dict[Any, Any]) -> Contents:
    """Decoded expected contents as the store's changelog keys and value bytes."""
    key_serde, value_serde = serde_for(spec.key_serde), serde_for(spec.value_serde)
    out: Contents = {}
    for key, value in expected.items():
        if spec.kind == "window":
            raw = changelog_window_key(key_serde.serialize(key[0]), int(key[1]))
        else:
            raw = key_serde.serialize(key)
        out[raw] = value_serde.serialize(value)
    return out


def agreeing(
    spec: StoreSpec,
    decoded: dict[Any, Any],
    actual: Contents,
    agrees: Callable[[Any, Any], bool],
) -> Contents:
    """Expected contents (encoded) where each key whose restored value ``agrees`` with the
    recomputed one holds the restored bytes, so only disagreeing keys differ."""
    value_serde = serde_for(spec.value_serde)
    out = encode(spec, decoded)
    for key, value in decoded.items():
        raw = next(iter(encode(spec, {key: value})))
        if raw in actual:
            try:
                restored = value_serde.deserialize(actual[raw])
            except Exception:  # noqa: BLE001 - an undecodable value disagrees
                continue
            if agrees(value, restored):
                out[raw] = actual[raw]
    return out


def _source_of(record: KafkaRecord) -> tuple[str, int, int] | None:
    for name, value in record.headers:
        if name == SOURCE and value:
            topic, partition, offset = value.decode().rsplit(":", 2)
            return topic, int(partition), int(offset)
    return None


@dataclass
class InputBounds:
    """Where a task's state stopped in the model's inputs."""

    ends: dict[tuple[str, int], int]  # (input topic, partition) -> end offset (exclusive)
    owner: Callable[[bytes], bool] | None = None  # keys routed to this task (repartition)
    #: Keys of an input record only part of whose repartition records the task processed:
    #: its state holds some of that record's effects, a recomputation all or none.
    uncertain: set[bytes] = field(default_factory=set)


def input_bounds(
    settings: StatekeeperSettings, topology: Any, task: RestoredTask, inputs: tuple[str, ...]
) -> InputBounds:
    """Where ``task``'s restored state stopped in ``inputs`` (see the module docstring)."""
    app = settings.application_id
    own = set(topology.internal_topics(app))
    sources = set(topology.source_topics(app))
    took_over = _takeover(settings)
    carried = {c.old_topic: c for c in (took_over.carried if took_over else ())}
    mine = [t for t in topology.subtopology_topics(app, task.subtopology) if t in own]
    admin = make_admin(settings.bootstrap_servers)
    conf = consumer_config(settings.bootstrap_servers)
    bounds = InputBounds({})
    for tp, end in task.source_offsets.items():
        topic, _, partition_text = tp.rpartition(":")
        partition = int(partition_text)
        if topic in inputs:
            bounds.ends[(topic, partition)] = max(bounds.ends.get((topic, partition), 0), end)
            continue
        if topic in own:
            routed_by = topic
        elif took_over is not None and topic not in sources:
            # An older version's repartition topic, which the migrated markers carry.
            if partition_count(admin, topic) is None:
                continue  # deleted since: the bounds come from the app's own topics
            routed_by = carried[topic].new_topic if topic in carried else (mine or [topic])[0]
        else:
            continue
        dropped = None
        if topic in carried:
            c = carried[topic]
            dropped = (c.max_batch, c.ranges.get(partition, (end, end))[0])
        _bound_by_repartition(settings, conf, bounds, topic, partition, end, inputs, dropped)
        width = partition_count(admin, routed_by) or 1  # the keys this task holds
        bounds.owner = lambda raw, w=width, p=task.partition: partition_for_key(raw, w) == p  # noqa: E731
    return bounds


def _takeover(settings: StatekeeperSettings) -> Any:
    """The app's takeover record (None when it did not take over from another version)."""
    from statekeeper.versions.recorded import state_root
    from statekeeper.versions.takeover import read_takeover, takeover_path

    return read_takeover(takeover_path(state_root(settings.state_dir, settings.application_id)))


def _bound_by_repartition(
    settings: StatekeeperSettings,
    conf: dict[str, Any],
    bounds: InputBounds,
    topic: str,
    partition: int,
    end: int,
    inputs: tuple[str, ...],
    dropped: tuple[int, int] | None = None,
) -> None:
    """Input ends from the ``sk.source`` headers of the repartition records below ``end``;
    the keys of a last input record whose repartition records continue past ``end`` become
    uncertain. ``dropped``: ``(max_batch, start)`` of an older version's carried topic: its
    records from ``start`` on of micro-batches after ``max_batch`` were not read (the new
    version read their input itself)."""
    start = log_start_offsets(conf, [(topic, partition)], settings.broker_timeout_s)
    stop = log_end_offsets(conf, [(topic, partition)], settings.broker_timeout_s)
    records = read_ranges(
        conf,
        [OffsetRange(topic, partition, start[(topic, partition)], stop[(topic, partition)])],
        settings.broker_timeout_s,
    )[tp_key(topic, partition)]
    last: dict[tuple[str, int], int] = {}
    if dropped is not None:
        records = [r for r in records if not _dropped(r, *dropped)]
    for record in records:
        source = _source_of(record)
        if record.offset >= end or source is None or source[0] not in inputs:
            continue
        key = (source[0], source[1])
        last[key] = max(last.get(key, -1), source[2])
    for key, offset in last.items():
        bounds.ends[key] = max(bounds.ends.get(key, 0), offset + 1)
    split = {
        (s[0], s[1], s[2])
        for r in records
        if r.offset >= end and (s := _source_of(r)) is not None and last.get((s[0], s[1])) == s[2]
    }
    bounds.uncertain |= {r.key for r in records if r.key is not None and _source_of(r) in split}


def _dropped(record: KafkaRecord, max_batch: int, start: int) -> bool:
    if record.offset < start:
        return False
    found = dedupe_id(record.headers)
    return found is not None and found[1] > max_batch


def _session(settings: StatekeeperSettings) -> tuple[Any, bool]:
    """The session ``drill --spark`` recomputes with (see :func:`batch_session`)."""
    from statekeeper.spark.session_env import batch_session

    return batch_session(settings.spark_master, "statekeeper-drill")


def _bounded_records(
    settings: StatekeeperSettings, topology: Any, task: RestoredTask, inputs: tuple[str, ...]
) -> tuple[InputBounds, list[KafkaRecord]]:
    """The task's bounds in ``inputs`` and the input records below them (from log start)."""
    bounds = input_bounds(settings, topology, task, inputs)
    if not bounds.ends:
        return bounds, []
    conf = consumer_config(settings.bootstrap_servers)
    starts = log_start_offsets(conf, list(bounds.ends), settings.broker_timeout_s)
    ranges = [OffsetRange(t, p, starts[(t, p)], end) for (t, p), end in bounds.ends.items()]
    runs = read_ranges(conf, ranges, settings.broker_timeout_s)
    return bounds, [r for run in runs.values() for r in run]


def check_with_spark(
    settings: StatekeeperSettings,
    topology: Any,
    tasks: list[RestoredTask],
    models: list[SparkStoreModel],
) -> dict[tuple[str, str], CheckResult]:
    """The ``spark`` check of every restored store a model covers, per ``(task, store)``."""
    results: dict[tuple[str, str], CheckResult] = {}
    if not models:
        return results
    spark, made_here = _session(settings)
    try:
        for task in tasks:
            read: dict[tuple[str, ...], tuple[InputBounds, list[KafkaRecord]]] = {}
            for model in models:
                store = task.stores.get(model.store)
                if store is None:
                    continue
                if model.inputs not in read:  # models of the same inputs share one read
                    read[model.inputs] = _bounded_records(settings, topology, task, model.inputs)
                bounds, records = read[model.inputs]
                if not bounds.ends:
                    results[(task.task_id, model.store)] = CheckResult(
                        SKIPPED, f"the restored state read none of {list(model.inputs)}"
                    )
                    continue
                window = store.spec.kind == "window"

                def compared(raw: bytes, b: InputBounds = bounds, w: bool = window) -> bool:
                    key = raw[:-8] if w else raw
                    return (b.owner is None or b.owner(key)) and key not in b.uncertain

                decoded = model.expected(spark, records)
                if model.agrees is None:
                    expected = encode(store.spec, decoded)
                else:
                    expected = agreeing(store.spec, decoded, store.contents, model.agrees)
                expected = {k: v for k, v in expected.items() if compared(k)}
                actual = {k: v for k, v in store.contents.items() if compared(k)}
                diff = diff_contents(expected, actual)
                what = f"the {model.name} of {len(records)} input record(s)"
                if bounds.uncertain:
                    what += (
                        f" ({len(bounds.uncertain)} key(s) of a partly processed input record "
                        "not compared)"
                    )
                results[(task.task_id, model.store)] = diff_result(
                    store.spec,
                    diff,
                    what,
                    expected_as="recomputed",
                    passed=f"{len(expected)} keys equal to {what}",
                    live=live_values(settings, task.task_id, store.spec, diff.examples),
                )
    finally:
        if made_here:
            spark.stop()
    return results
