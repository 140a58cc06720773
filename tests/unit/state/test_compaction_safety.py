"""Compaction safety of the commit protocol (DESIGN.md invariant 2), as a Hypothesis property.

The embedded broker never compacts; Kafka's log cleaner may, anywhere below the active
segment: drop a record superseded by a later record of the same key (commit markers share
one reserved key, so every marker but the newest goes too) and drop a tombstone once no
older record of its key is left (after ``delete.retention.ms``). This test runs the real
commit path (TaskTransaction through TaskStateManager with RocksDB and in-memory stores), the
real open/_reconcile and the real ChangelogRestorer over an in-memory changelog that such a
cleaner compacts at random between steps, with crashes at every commit step and restarts
with a current, a stale (an older copy: a snapshot or another executor's) or no local copy.
Every open must give exactly the state of the last committed batch (the model).

The seam: the restorer's four broker-facing names (``eof_consumer``, ``watermarks``,
``assign_at``, ``PartitionReader``) are replaced by an in-memory partition source with the
same contract (a read starts at an offset, yields runs of records in offset order, ends at
the log end); the writer is the ChangelogWriter contract over the same logs, where a crash
keeps any prefix of each partition's unacknowledged records, as a killed process would.

What it found (each kept below as a regular example):
1. A task that never committed and crashed twice rolled a store's uncommitted records
   forward to batch -1, the batch the first open's revert marks (no compaction needed).
   Fixed in TaskStateManager._reconcile: batch -1 is no batch to roll forward to.
2. Under an unbounded cleaner, an uncommitted record of a crashed attempt may supersede the
   committed value of its key. When the cleaner runs before the next open re-logged that
   value, and that open has no local copy at the last marker (in-memory stores never have
   one), the committed value is gone from the changelog (strict xfail).
3. Likewise a store whose marker was missing after a crash between markers rolls forward
   from its tail; a tombstone in that tail may be removed (after delete.retention.ms) once
   the cleaner dropped the value it deleted, and the roll-forward keeps the old value
   (strict xfail).
4. A local copy or snapshot older than delete.retention.ms may miss a tombstone the cleaner
   removed since: it is modelled as too old to restore from.
The bounded cleaner — it never uses a crashed attempt's records before the next open
settled them (``min.compaction.lag.ms`` longer than the outage: the audit checks and
``--fix`` sets it where the broker compacts; or a transactional writer's last stable
offset) and copies older than delete.retention.ms are not restored from — passes.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from statekeeper.changelog import restorer as restorer_module
from statekeeper.changelog.fencing import begin_record, marker_headers, marker_key
from statekeeper.changelog.records import MARKER_KEY, CommitMarker, changelog_topic
from statekeeper.changelog.restorer import ChangelogRestorer
from statekeeper.kafka.partition_reader import PartitionRun
from statekeeper.state.directory import TaskDirectory
from statekeeper.state.task_state_manager import TaskStateManager
from statekeeper.state.transaction import TransactionState
from statekeeper.stores import Stores

APP = "compaction"
TASK = "0_0"
SPECS = [
    Stores.persistent("kv").with_serdes("str", "int").with_caching_enabled(1 << 20),
    Stores.in_memory("mem").with_serdes("str", "int"),
]
STORES = [s.name for s in SPECS]
TOPICS = {name: changelog_topic(APP, name) for name in STORES}
KEYS = ["a", "b", "c"]
CHUNK = 3  # records per read run: markers fall at every position of a run


class Crash(Exception):
    """The process died here."""


def log_step(text: str) -> None:
    """Shown with a failing Hypothesis example (a no-op in the plain tests)."""
    if currently_in_test_context():
        note(text)


# -- the in-memory changelog -------------------------------------------------------------


@dataclass
class Record:
    offset: int
    key: bytes
    value: bytes | None
    headers: list[tuple[str, bytes]] | None = None


class Message:
    """What the restorer reads of a confluent_kafka Message."""

    __slots__ = ("_record",)

    def __init__(self, record: Record) -> None:
        self._record = record

    def offset(self) -> int:
        return self._record.offset

    def key(self) -> bytes:
        return self._record.key

    def value(self) -> bytes | None:
        return self._record.value

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._record.headers


@dataclass
class PartitionLog:
    """One changelog partition: records in offset order; compaction leaves offset gaps."""

    records: list[Record] = field(default_factory=list)
    end: int = 0  # the log-end offset (next offset to write)

    def append(
        self, key: bytes, value: bytes | None, headers: list[tuple[str, bytes]] | None = None
    ) -> int:
        self.records.append(Record(self.end, key, value, headers))
        self.end += 1
        return self.end - 1


class Broker:
    """Changelog partitions in memory, read through the restorer's broker-facing names."""

    def __init__(self) -> None:
        self.logs: dict[tuple[str, int], PartitionLog] = defaultdict(PartitionLog)

    def patch(self) -> Any:
        broker = self

        class Consumer:
            def __init__(self) -> None:
                self.starts: dict[Any, int] = {}

            def close(self) -> None:
                pass

        def eof_consumer(config: dict[str, Any], purpose: str = "reader", **_: Any) -> Consumer:
            return Consumer()

        def watermarks(consumer: Consumer, tps: list[Any], timeout_s: float):
            # Compaction never moves the log start (only retention or DeleteRecords do).
            return {tp: 0 for tp in tps}, {tp: broker.logs[tp].end for tp in tps}

        def assign_at(consumer: Consumer, starts: dict[Any, int]) -> None:
            consumer.starts = dict(starts)

        def reader(consumer: Consumer, starts: dict[Any, int], **_: Any) -> Iterator[PartitionRun]:
            for tp, start in starts.items():
                first = max(start, 0)  # OFFSET_BEGINNING is negative
                records = [r for r in broker.logs[tp].records if r.offset >= first]
                for i in range(0, len(records), CHUNK):
                    run = records[i : i + CHUNK]
                    yield PartitionRun(tp, [Message(r) for r in run], [r.key for r in run])

        return mock.patch.multiple(
            restorer_module,
            eof_consumer=eof_consumer,
            watermarks=watermarks,
            assign_at=assign_at,
            PartitionReader=reader,
        )


class Writer:
    """The ChangelogWriter contract over :class:`Broker`: sends wait unacknowledged until
    ``flush``; :meth:`kill` keeps any prefix of each partition's unacknowledged records."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.pending: dict[tuple[str, int], list[tuple[bytes, bytes | None, Any]]] = defaultdict(
            list
        )
        self.dead = False
        self.markers_landing: list[bool] | None = None  # set: die while writing markers

    def send(
        self, topic: str, partition: int, key: bytes, value: bytes | None, headers: Any = None
    ) -> None:
        self.send_all(topic, partition, [(key, value)], headers)

    def send_all(
        self,
        topic: str,
        partition: int,
        items: list[tuple[bytes, bytes | None]],
        headers: Any = None,
    ) -> None:
        if not self.dead:
            self.pending[(topic, partition)].extend((k, v, headers) for k, v in items)

    def flush(self, timeout_s: float) -> None:
        if self.dead:
            raise Crash("flush after death")
        for tp, items in self.pending.items():
            for key, value, headers in items:
                self.broker.logs[tp].append(key, value, headers)
        self.pending.clear()

    def write_begins(self, partitions: list[tuple[str, int]], epoch: int, timeout_s: float) -> None:
        for topic, partition in partitions:
            key, value, headers = begin_record(epoch)
            self.pending[(topic, partition)].append((key, value, headers))
        self.flush(timeout_s)

    def write_markers(
        self, markers: list[tuple[str, int, CommitMarker]], timeout_s: float
    ) -> dict[tuple[str, int], int]:
        self.flush(timeout_s)
        offsets = {}
        landing = self.markers_landing
        for i, (topic, partition, marker) in enumerate(markers):
            if landing is None or landing[i % len(landing)]:
                offsets[(topic, partition)] = self.broker.logs[(topic, partition)].append(
                    marker_key(marker.epoch), marker.encode(), marker_headers(marker.epoch)
                )
        if landing is not None:
            raise Crash("died while writing markers")
        return offsets

    def kill(self, kept: dict[tuple[str, int], int]) -> None:
        """Die: of each partition's unacknowledged records, the first ``kept[tp]`` landed."""
        for tp, items in self.pending.items():
            for key, value, headers in items[: kept.get(tp, 0)]:
                self.broker.logs[tp].append(key, value, headers)
        self.pending.clear()
        self.dead = True


def compact(log: PartitionLog, boundary: int, drop: Any) -> list[int]:
    """One cleaner pass over the records below ``boundary`` (the active segment's base):
    ``drop(record) -> bool`` picks which of the legal candidates go. Returns dropped offsets.

    A candidate is a record superseded by a later record of its key that is itself below the
    boundary (the cleaner's offset map covers only the cleanable section), or a tombstone of
    a key with no older record left (what ``delete.retention.ms`` later allows)."""
    cleanable = [r for r in log.records if r.offset < boundary]
    latest: dict[bytes, int] = {}
    for r in cleanable:
        latest[r.key] = r.offset
    dropped = {r.offset for r in cleanable if latest[r.key] != r.offset and drop(r)}
    remaining = [r for r in log.records if r.offset not in dropped]
    seen: set[bytes] = set()
    for r in remaining:
        if r.offset < boundary and r.value is None and r.key not in seen and drop(r):
            dropped.add(r.offset)
        seen.add(r.key)
    log.records = [r for r in log.records if r.offset not in dropped]
    return sorted(dropped)


# -- the system under test: one task of two stores ------------------------------------------


class Harness:
    """Runs batches, crashes, compactions and restarts of one task; checks every open."""

    def __init__(self, root: Path, broker: Broker, bounded: bool) -> None:
        self.root = root
        self.broker = broker
        self.bounded = bounded
        self.task_dir = TaskDirectory(root / "state", APP, TASK)
        # Closed copies of kv's local store (a snapshot, another executor's copy) and the
        # changelog offset each is checkpointed at, oldest first.
        self.copies: list[tuple[Path, int]] = []
        # The model: each store's state as of the last committed batch.
        self.committed: dict[str, dict[str, int]] = {name: {} for name in STORES}
        self.committed_batch: int | None = None
        # Per partition, the offset of the first record of a crashed attempt not yet settled
        # by an open (the bounded cleaner stays below it).
        self.unsettled: dict[tuple[str, int], int] = {}
        self.task: TaskStateManager | None = None
        self.writer: Writer | None = None

    def restorer(self) -> ChangelogRestorer:
        return ChangelogRestorer({}, batch_records=2, threads=1)

    def open(self, local: str, data) -> None:
        """Open the task with the current (``keep``), an older (``stale``: any earlier closed
        copy) or no local copy of the persistent store."""
        kv_dir = self.task_dir.store_path("kv")
        if local == "none":
            shutil.rmtree(kv_dir, ignore_errors=True)
        elif local == "stale" and self.copies:
            copy, _ = self.copies[data.draw(st.integers(0, len(self.copies) - 1), label="copy")]
            shutil.rmtree(kv_dir, ignore_errors=True)
            shutil.copytree(copy, kv_dir)
        self.writer = Writer(self.broker)
        self.task = TaskStateManager(
            application_id=APP,
            task_id=TASK,
            partition=0,
            specs=SPECS,
            task_dir=self.task_dir,
            writer=self.writer,  # type: ignore[arg-type]
            restorer=self.restorer(),
            lock_timeout_s=1,
        )
        outcomes = {o.job.store.name: o for o in self.task.open()}
        self.unsettled.clear()  # the open re-logged or rolled forward every tail
        state = {name: dict(self.task.store(name).all()) for name in STORES}
        log_step(f"open(local={local}): {state}, batch {self.task.last_batch_id}")
        assert state == self.committed, f"open(local={local}) restored {state}"
        assert self.task.last_batch_id in (
            (self.committed_batch,) if self.committed_batch is not None else (None, -1)
        )
        # A partial restore stays partial even when compaction removed the marker it starts
        # from: a local copy with a checkpoint never falls back to a full restore.
        assert outcomes["kv"].job.reason in (None, "no local state"), outcomes["kv"].job.reason

    def close(self) -> None:
        assert self.task is not None
        checkpoint = self.task.store("kv").read_metadata().changelog_offset  # what is on disk
        self.task.close()
        self.task = None
        kv_dir = self.task_dir.store_path("kv")
        if kv_dir.exists():
            copy = Path(tempfile.mkdtemp(prefix="copy", dir=self.root)) / "kv"
            shutil.copytree(kv_dir, copy)
            self.copies.append((copy, -1 if checkpoint is None else checkpoint))

    def batch(self, writes: list[tuple[str, str, int | None]], crash: str | None, data) -> None:
        """Write ``writes`` and commit them, dying at ``crash`` (a commit step, ``process``
        before the commit, or ``markers`` while writing them)."""
        task, writer = self.task, self.writer
        assert task is not None and writer is not None
        batch_id = 0 if self.committed_batch is None else self.committed_batch + 1
        ends = {tp: log.end for tp, log in self.broker.logs.items()}
        staged = {name: dict(self.committed[name]) for name in STORES}
        for store, key, value in writes:
            if value is None:
                task.store(store).delete(key)
                staged[store].pop(key, None)
            else:
                task.store(store).put(key, value)
                staged[store][key] = value
        if crash == "markers":
            writer.markers_landing = data.draw(
                st.lists(st.booleans(), min_size=2, max_size=2), label="markers landing"
            )
        elif crash is not None and crash != "process":
            state = TransactionState(crash)

            def die(step: TransactionState, _batch: int) -> None:
                if step is state:
                    raise Crash(f"died at {step}")

            task.commit_hooks.append(die)
        try:
            if crash == "process":
                raise Crash("died before the commit")
            task.commit(batch_id, {"in:0": batch_id + 1})
            assert crash is None, "the crash hook did not fire"
            committed = True
        except Crash:
            kept = {
                tp: data.draw(st.integers(0, len(items)), label=f"{tp[0]} records landing")
                for tp, items in writer.pending.items()
            }
            writer.kill(kept)
            # Committed once any marker of the batch landed: the next open rolls forward.
            committed = any(
                r.key == MARKER_KEY and CommitMarker.decode(r.value, where="t").batch_id == batch_id
                for tp, log in self.broker.logs.items()
                for r in log.records
                if r.offset >= ends.get(tp, 0)
            )
            # Everything the attempt wrote waits for the next open: an uncommitted record
            # is reverted then, a committed batch's record (some marker landed) is rolled
            # forward into stores whose marker is missing.
            for tp, log in self.broker.logs.items():
                if log.end > ends.get(tp, 0):
                    self.unsettled.setdefault(tp, ends.get(tp, 0))
            self.close()
        if committed:
            self.committed, self.committed_batch = staged, batch_id
        log_step(f"batch {batch_id} {writes} crash={crash} committed={committed}")

    def compact(self, data) -> None:
        for tp in sorted(self.broker.logs):
            log = self.broker.logs[tp]
            limit = self.unsettled.get(tp, log.end) if self.bounded else log.end
            # Drawn as a distance from the limit: small draws (what Hypothesis tries most and
            # shrinks towards) give the cleaner the most to work with.
            boundary = limit - data.draw(st.integers(0, limit), label=f"{tp[0]} behind limit")
            tombstones = {r.offset for r in log.records if r.value is None}
            dropped = compact(log, boundary, lambda _r: data.draw(st.booleans()))
            log_step(f"compact {tp[0]} below {boundary}: dropped {dropped}")
            gone = [t for t in dropped if t in tombstones]
            if self.bounded and gone and tp == (TOPICS["kv"], 0):
                # A tombstone goes delete.retention.ms after its cleaning, so a copy older
                # than that (checkpointed before the tombstone) may miss the delete: such
                # copies are too old to restore from (snapshot max age < delete.retention.ms).
                self.copies = [(c, ckpt) for c, ckpt in self.copies if ckpt > max(gone)]


WRITES = st.lists(
    st.tuples(st.sampled_from(STORES), st.sampled_from(KEYS), st.none() | st.integers(0, 9)),
    min_size=1,
    max_size=5,
)
CRASHES = st.none() | st.sampled_from(
    ["process", "flushed", "produced", "markers", "marked", "stored", "committed"]
)
LOCAL = st.sampled_from(["keep", "stale", "none"])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("batch"), WRITES, CRASHES),
        st.tuples(st.just("compact")),
        st.tuples(st.just("restart"), LOCAL),
    ),
    min_size=1,
    max_size=14,
)


def run_history(steps: list[tuple], data, bounded: bool) -> None:
    broker = Broker()
    with tempfile.TemporaryDirectory() as tmp, broker.patch():
        harness = Harness(Path(tmp), broker, bounded)
        try:
            run_steps(harness, steps, data)
        finally:
            if harness.task is not None:
                harness.task.close()


def run_steps(harness: Harness, steps: list[tuple], data) -> None:
    """Open the task, run ``steps`` and end with it open (reopened after a last crash)."""
    harness.open("keep", data)
    for step in [*steps, ("end",)]:
        if harness.task is None:  # died: the cleaner may run, then a restart
            harness.compact(data)
            harness.open(data.draw(LOCAL, label="local copy after crash"), data)
        if step[0] == "batch":
            harness.batch(step[1], step[2], data)
        elif step[0] == "compact":
            harness.compact(data)
        elif step[0] == "restart":
            harness.close()
            harness.compact(data)
            harness.open(step[1], data)


PROPERTY = settings(
    max_examples=int(os.environ.get("STATEKEEPER_COMPACTION_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@PROPERTY
@given(steps=STEPS, data=st.data())
def test_every_open_restores_the_committed_state_under_bounded_compaction(steps, data):
    """Any legal compaction that leaves a crashed attempt's records alone until the next open
    settles them (min.compaction.lag.ms > downtime, or a transactional writer's LSO)."""
    run_history(steps, data, bounded=True)


@pytest.mark.skipif(
    not os.environ.get("STATEKEEPER_COMPACTION_UNBOUNDED"),
    reason="finds the known gap below (~1-2 min with shrinking); set "
    "STATEKEEPER_COMPACTION_UNBOUNDED=1 to search for it again",
)
@pytest.mark.xfail(strict=True, reason="known gap, see test_known_gap_*")
@PROPERTY
@given(steps=STEPS, data=st.data())
def test_every_open_restores_the_committed_state_under_any_compaction(steps, data):
    """The unbounded cleaner: may use a crashed attempt's records before the next open."""
    run_history(steps, data, bounded=False)


class Script:
    """Answers the harness's draws from a fixed list (a replayed Hypothesis example)."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)

    def draw(self, strategy: Any, label: str | None = None) -> Any:
        return self.answers.pop(0)


def _uncommitted_record_supersedes_committed_value(bounded: bool) -> None:
    """The shrunk example the unbounded property found: batch 0 commits mem c=0; the attempt
    of batch 1 writes c=0 again and dies after its records were acknowledged, before its
    markers; the cleaner drops offset 0 (superseded by the uncommitted record at 2); the
    in-memory store restores from the changelog alone and has no c, and the open's revert
    then tombstones c (its committed value is unknown)."""
    broker = Broker()
    with tempfile.TemporaryDirectory() as tmp, broker.patch():
        harness = Harness(Path(tmp), broker, bounded)
        harness.open("keep", None)
        harness.batch([("mem", "c", 0)], None, None)
        harness.batch([("mem", "c", 0)], "produced", Script())
        mem_log = broker.logs[(TOPICS["mem"], 0)]
        # The cleaner with the whole log below the active segment (bounded: below the
        # crashed attempt's first record), dropping every candidate.
        limit = harness.unsettled.get((TOPICS["mem"], 0), mem_log.end) if bounded else mem_log.end
        dropped = compact(mem_log, limit, lambda _r: True)
        assert dropped == ([] if bounded else [0])
        harness.open("keep", None)
        harness.task.close()


def test_bounded_cleaner_keeps_the_committed_value_of_a_crashed_attempts_key():
    _uncommitted_record_supersedes_committed_value(bounded=True)


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="known gap: an uncommitted record supersedes the committed value and the "
    "cleaner drops that value before the next open re-logs it (see module docstring)",
)
def test_known_gap_uncommitted_record_supersedes_committed_value():
    _uncommitted_record_supersedes_committed_value(bounded=False)


def _roll_forward_of_a_compacted_tombstone(bounded: bool) -> None:
    """The second example the property found: batch 0 commits kv a=0; batch 1 deletes a and
    dies while writing markers, mem's landed, kv's did not (batch 1 is committed, the open
    rolls kv forward from its tail). The cleaner first drops a=0 (superseded by the
    tombstone), then, after delete.retention.ms, the tombstone itself: kv's tail is empty and
    the roll-forward keeps the local a=0."""
    broker = Broker()
    with tempfile.TemporaryDirectory() as tmp, broker.patch():
        harness = Harness(Path(tmp), broker, bounded)
        harness.open("keep", None)
        harness.batch([("kv", "a", 0)], None, None)
        harness.batch([("kv", "a", None)], "markers", Script([False, True]))
        kv_log = broker.logs[(TOPICS["kv"], 0)]
        limit = harness.unsettled.get((TOPICS["kv"], 0), kv_log.end) if bounded else kv_log.end
        dropped = compact(kv_log, limit, lambda _r: True)
        assert dropped == ([] if bounded else [0, 2])
        harness.open("keep", None)
        harness.task.close()


def test_bounded_cleaner_keeps_a_tombstone_the_open_rolls_forward():
    _roll_forward_of_a_compacted_tombstone(bounded=True)


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="known gap: a roll-forward tombstone removed after delete.retention.ms before "
    "the next open (see module docstring)",
)
def test_known_gap_roll_forward_misses_a_tombstone_the_cleaner_removed():
    _roll_forward_of_a_compacted_tombstone(bounded=False)


def test_partial_restore_stays_partial_after_its_marker_was_compacted():
    """A local copy checkpointed at a marker the cleaner removed restores only the tail."""
    broker = Broker()
    with tempfile.TemporaryDirectory() as tmp, broker.patch():
        harness = Harness(Path(tmp), broker, bounded=True)
        harness.open("keep", None)
        harness.batch([("kv", "a", 1), ("kv", "b", 1)], None, None)
        harness.close()  # copy0: checkpointed at batch 0's marker
        harness.open("keep", None)
        kv_log = broker.logs[(TOPICS["kv"], 0)]
        checkpoint = next(r.offset for r in kv_log.records if r.key == MARKER_KEY)
        for value in (2, 3):
            harness.batch([("kv", "a", value), ("kv", "c", value)], None, None)
        harness.close()
        dropped = compact(kv_log, kv_log.end, lambda _r: True)
        assert checkpoint in dropped
        # Reopen from the copy taken at batch 0: its marker is gone, later ones remain.
        harness.open("stale", Script(0))
        [kv] = [o for o in harness.task.restore_outcomes if o.job.store.name == "kv"]
        assert not kv.full and kv.job.reason is None
        assert kv.start_offset == checkpoint + 1
        # Only what survived after the checkpoint was replayed: a=3, c=3 (a=2, c=2 and the
        # two older markers were compacted away).
        assert kv.restored_records == 2
        assert dict(harness.task.store("kv").all()) == {"a": 3, "b": 1, "c": 3}
        harness.task.close()


def test_a_task_that_never_committed_reverts_every_stores_tail():
    """Found by the property (no compaction needed), fixed in _reconcile: batch 0 dies
    twice before any commit. The first open reverts kv's records and marks kv with batch -1
    (nothing committed); the second attempt's records land only in mem, which has no marker.
    Batch -1 must not count as a batch mem is "behind" and rolls forward to: mem's records
    are uncommitted and reverted too."""
    broker = Broker()
    with tempfile.TemporaryDirectory() as tmp, broker.patch():
        harness = Harness(Path(tmp), broker, bounded=True)
        harness.open("keep", None)
        harness.batch([("kv", "a", None), ("kv", "b", None)], "markers", Script([False, False]))
        harness.open("keep", None)
        assert harness.task.last_batch_id == -1
        harness.batch([("mem", "a", None), ("mem", "a", 0)], "process", Script(2))
        assert [r.value for r in broker.logs[(TOPICS["mem"], 0)].records] == [None, (0).to_bytes(8)]
        harness.open("keep", None)  # the model: nothing committed, both stores empty
        harness.task.close()


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="known limit (as for any Kafka consumer): a copy older than delete.retention.ms "
    "misses a delete whose tombstone the cleaner removed; such copies must not be used",
)
def test_known_limit_a_copy_older_than_delete_retention_misses_a_removed_tombstone():
    broker = Broker()
    with tempfile.TemporaryDirectory() as tmp, broker.patch():
        harness = Harness(Path(tmp), broker, bounded=False)
        harness.open("keep", None)
        harness.batch([("kv", "a", 0)], None, None)
        harness.close()  # the copy (a snapshot, say) holds a=0 at batch 0
        harness.open("keep", None)
        harness.batch([("kv", "a", None)], None, None)
        harness.close()
        kv_log = broker.logs[(TOPICS["kv"], 0)]
        # a=0, batch 0's marker, then (no older a left) the tombstone itself.
        assert compact(kv_log, kv_log.end, lambda _r: True) == [0, 1, 2]
        harness.open("stale", Script(0))
