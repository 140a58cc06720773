"""Rebuilds stores from their changelog partitions, up to the last commit marker.

Reads each partition to EOF (invariant 5) with the shared
:class:`~statekeeper.kafka.partition_reader.PartitionReader`, applies only records that a
commit marker closes (invariant 2) in bounded write batches, and hands back the uncommitted
tail so the task state manager can decide to drop it or roll it forward.

Several partitions restore *together*: one consumer assigned to all of them, so librdkafka
fetches them in parallel in its own threads while one Python thread applies what arrives.
A thread per partition was slower: they contend for the GIL (1M records with epoch headers
over 4 partitions: 4 threads 284-316k records/s, one thread 409-469k, measured).
``threads`` > 1 splits the partitions into that many groups, each read together in a
thread of its own.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer

from statekeeper.changelog.committed import CommittedRecords
from statekeeper.changelog.fencing import CommitSplitter, FenceCounts, is_marker_key
from statekeeper.changelog.listeners import BaseRestoreListener, StateRestoreListener
from statekeeper.changelog.records import CommitMarker
from statekeeper.errors import (
    BrokerUnavailableError,
    ChangelogCorruptError,
    ChangelogTopicError,
    ChangelogTrimmedError,
)
from statekeeper.gc_pause import cycle_gc_paused
from statekeeper.kafka.offsets import watermarks
from statekeeper.kafka.partition_reader import (
    NullKeyError,
    OffsetOutOfRangeError,
    PartitionFetchError,
    PartitionMissingError,
    PartitionReader,
    ReadStalledError,
    assign_at,
    eof_consumer,
)
from statekeeper.stores.base import StoreMetadata


class InconsistentStateError(Exception):
    """Local state cannot continue from its checkpoint; the caller wipes and restores fully."""


@dataclass
class RestoreJob:
    """Restore one store from one changelog partition."""

    topic: str
    partition: int
    store: Any  # a built store (metered layer): restore_batch / read_metadata / wipe
    task_id: str
    full: bool = False
    reason: str | None = None  # why a full restore (reported to listeners)
    #: Window changelogs lose old windows by retention: a log start above 0 is normal there.
    #: Elsewhere it means records were deleted, and a full replay would miss keys.
    log_start_may_advance: bool = False


@dataclass
class RestoreOutcome:
    """What a partition restore found and did."""

    job: RestoreJob
    start_offset: int
    last_marker: CommitMarker | None
    marker_offset: int | None
    restored_records: int = 0
    restored_bytes: int = 0
    seconds: float = 0.0
    full: bool = False
    tail: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    #: The partition's fence after the read (its newest epoch) and what fencing dropped.
    fence: int = 0
    fenced: FenceCounts = field(default_factory=FenceCounts)
    fenced_keys: set[bytes] = field(default_factory=set)  # keys of fenced data records

    @property
    def records_per_s(self) -> float:
        return self.restored_records / self.seconds if self.seconds > 0 else 0.0

    @property
    def bytes_per_s(self) -> float:
        return self.restored_bytes / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class EpochCheck:
    """The newest epoch on a partition past a point, and what fencing dropped there."""

    fence: int
    fenced: FenceCounts
    fenced_keys: frozenset[bytes] = frozenset()  # keys of the fenced data records


class ChangelogRestorer:
    """Restores stores from changelog partitions (see module docstring)."""

    def __init__(
        self,
        consumer_config: dict[str, Any],
        *,
        batch_records: int = 50_000,
        threads: int = 1,
        timeout_s: float = 15.0,
        listener: StateRestoreListener | None = None,
    ) -> None:
        self._consumer_config = dict(consumer_config)
        self.batch_records = batch_records
        self.threads = threads
        self.timeout_s = timeout_s
        self.listener: StateRestoreListener = listener or BaseRestoreListener()

    def restore_all(self, jobs: list[RestoreJob]) -> list[RestoreOutcome]:
        """Restore every job, read together in ``threads`` groups; results in job order."""
        groups = [jobs[i :: self.threads] for i in range(min(self.threads, len(jobs)))]
        if len(groups) <= 1:
            return self._restore_together(jobs) if jobs else []
        with ThreadPoolExecutor(max_workers=len(groups)) as pool:
            outcomes = [o for group in pool.map(self._restore_together, groups) for o in group]
        by_job = {id(o.job): o for o in outcomes}
        return [by_job[id(job)] for job in jobs]

    def restore(self, job: RestoreJob) -> RestoreOutcome:
        """Restore one job, from its checkpoint or (``job.full``, or a checkpoint the log
        contradicts) from the start."""
        return self._restore_together([job])[0]

    def _restore_together(self, jobs: list[RestoreJob]) -> list[RestoreOutcome]:
        """Read ``jobs``' partitions through one consumer. A job whose checkpoint the log
        contradicts restores fully on its own afterwards."""
        parts: list[_PartitionRestore] = []
        try:
            with closing(eof_consumer(self._consumer_config, "restore")) as consumer:
                for job in jobs:
                    if job.full:
                        parts.append(self._prepare_full(job, consumer))
                        continue
                    try:
                        parts.append(self._prepare(job, job.store.read_metadata(), consumer))
                    except InconsistentStateError as exc:
                        _mark_full(job, exc)
                        parts.append(self._prepare_full(job, consumer))
                self._read_together(consumer, parts)
        except _ReadMustRestart as exc:
            # The log moved under a checkpointed read (its start passed the position): every
            # store of the group may be ahead of its own checkpoint, so all restore fully.
            for part in parts:
                _mark_full(part.job, exc)
            return [self._restore_fully(part.job) for part in parts]
        outcomes = []
        for part in parts:
            if part.failed is None:
                outcomes.append(part.outcome)
            else:
                _mark_full(part.job, part.failed)
                outcomes.append(self._restore_fully(part.job))
        return outcomes

    def _restore_fully(self, job: RestoreJob) -> RestoreOutcome:
        """Wipe ``job``'s store and read its partition from the start."""
        with closing(eof_consumer(self._consumer_config, "restore")) as consumer:
            part = self._prepare_full(job, consumer)
            self._read_together(consumer, [part])
        if part.failed is not None:  # only a checkpointed read can fail this way
            raise part.failed
        return part.outcome

    def _prepare_full(self, job: RestoreJob, consumer: Consumer) -> _PartitionRestore:
        if job.reason:
            self.listener.on_restore_reason((job.topic, job.partition), job.store.name, job.reason)
        job.store.wipe()
        return self._prepare(job, StoreMetadata(), consumer)

    def newest_epoch(
        self,
        topic: str,
        partition: int,
        from_offset: int | None,
        fence: int,
        until: int | None = None,
    ) -> EpochCheck:
        """Read ``topic[partition]`` from ``from_offset`` (None: the start) to its end (or to
        ``until``, exclusive), applying nothing, and report the newest epoch found there (at
        least ``fence``) and what fencing dropped: how a writer checks it was not
        superseded, and how a restore checks that a local commit was not a fenced one's."""
        where = f"{topic}[{partition}]"
        splitter = CommitSplitter(where, lambda *_: None, fence=fence)
        tp = (topic, partition)
        consumer = eof_consumer(self._consumer_config, "fence-check")
        try:
            starts = {tp: OFFSET_BEGINNING if from_offset is None else from_offset}
            assign_at(consumer, starts)
            ends = None if until is None else {tp: until}
            reader = PartitionReader(
                consumer, starts, ends=ends, timeout_s=self.timeout_s, keyed=True
            )
            try:
                for _, msgs, keys in reader:
                    splitter.take(msgs, keys)  # type: ignore[arg-type]
            except (ReadStalledError, PartitionFetchError) as exc:
                raise BrokerUnavailableError(f"checking the epoch of {where}: {exc}") from exc
        finally:
            consumer.close()
        return EpochCheck(splitter.fence, splitter.fenced, frozenset(splitter.fenced_keys))

    # -- partitions ------------------------------------------------------------------------

    def _prepare(
        self, job: RestoreJob, meta: StoreMetadata, consumer: Consumer
    ) -> _PartitionRestore:
        """Check ``job``'s checkpoint against its partition's offsets and epochs; raises
        :class:`InconsistentStateError` when the log contradicts it."""
        store_name = job.store.name
        checkpoint = meta.changelog_offset
        full = checkpoint is None
        last_marker = (
            None
            if full
            else CommitMarker(
                meta.batch_id or 0, job.task_id, store_name, meta.source_offsets, meta.epoch
            )
        )
        outcome = RestoreOutcome(
            job=job,
            start_offset=0 if full else checkpoint + 1,  # type: ignore[operator]
            last_marker=last_marker,
            marker_offset=checkpoint,
            full=full,
        )
        low, high = self._watermarks(consumer, job)
        if checkpoint is None and low > 0 and not job.log_start_may_advance:
            raise ChangelogTrimmedError(
                f"changelog {job.topic}[{job.partition}] starts at offset {low}: records "
                "below it were deleted (audit --trim), so a full replay of store "
                f"{store_name} would miss every key last written there; restore it from a "
                "snapshot (statekeeper restore --from-snapshot latest)"
            )
        if checkpoint is not None and not low <= checkpoint < high:
            # The checkpointed marker is the first record of its produce batch, so even a
            # broker whose high watermark trails the log end reports one past it.
            raise InconsistentStateError(
                f"checkpointed offset {checkpoint} is outside changelog "
                f"{job.topic}[{job.partition}] (offsets {low}..{high - 1})"
            )
        verified = meta.verified_offset
        if checkpoint is not None and verified is not None and verified < checkpoint:
            # The commit was written by this copy's own task: had a newer epoch begun
            # between the last point it knew was its own and its marker, the commit was a
            # fenced (frozen, resumed) writer's, and so is this copy (changelog.fencing).
            seen = self.newest_epoch(
                job.topic, job.partition, max(verified, low), meta.epoch, until=checkpoint
            )
            if seen.fence > meta.epoch:
                raise InconsistentStateError(
                    f"local state's commit at {job.topic}[{job.partition}] offset "
                    f"{checkpoint} (epoch {meta.epoch}) was written after epoch "
                    f"{seen.fence} had begun: a fenced writer's commit"
                )
        return _PartitionRestore(self, outcome, meta, high)

    def _watermarks(self, consumer: Consumer, job: RestoreJob) -> tuple[int, int]:
        tp = (job.topic, job.partition)
        try:
            lows, highs = watermarks(consumer, [tp], self.timeout_s)
        except PartitionMissingError as exc:
            raise ChangelogTopicError(
                f"changelog {job.topic}[{job.partition}] does not exist: {exc}"
            ) from exc
        except BrokerUnavailableError as exc:
            raise BrokerUnavailableError(
                f"cannot read offsets of changelog {job.topic}[{job.partition}] within "
                f"{self.timeout_s:.0f} s: {exc}"
            ) from exc
        return lows[tp], highs[tp]

    def _read_together(self, consumer: Consumer, parts: list[_PartitionRestore]) -> None:
        """Read every part's partition to its end through ``consumer``, applying as the
        records arrive."""
        by_tp = {part.tp: part for part in parts}
        # A partial restore re-reads the checkpointed marker to verify it.
        starts = {part.tp: part.read_from for part in parts}
        assign_at(consumer, starts)
        for part in parts:
            part.start()
        # The high watermarks size each consume() so a short tail (the usual restart)
        # returns at once; a trailing one only means another round.
        reader = PartitionReader(
            consumer,
            starts,
            size_hints={part.tp: part.high for part in parts},
            timeout_s=self.timeout_s,
            keyed=True,
        )
        try:
            with cycle_gc_paused():
                for tp, msgs, keys in reader:
                    by_tp[tp].take(msgs, keys)  # type: ignore[arg-type]
        except PartitionMissingError as exc:
            raise ChangelogTopicError(
                f"changelog {_where(exc.tp)} does not exist: {exc.reason}; create the "
                "app's changelog topics (statekeeper creates them at start) or fix the name"
            ) from exc
        except OffsetOutOfRangeError as exc:
            raise _ReadMustRestart(
                f"checkpointed offset is outside changelog {_where(exc.tp)}: {exc.reason}"
            ) from exc
        except NullKeyError as exc:
            raise ChangelogCorruptError(
                f"changelog {_where(exc.tp)} offset {exc.offset} has a null key; changelog "
                "records always carry the store key (was something else producing to "
                "this topic?)"
            ) from exc
        except ReadStalledError as exc:
            stuck = ", ".join(map(_where, exc.pending))
            raise BrokerUnavailableError(
                f"changelog {stuck}: no data and no end-of-partition within "
                f"{self.timeout_s:.0f} s (broker unreachable?)"
            ) from exc
        except PartitionFetchError as exc:
            raise BrokerUnavailableError(
                f"reading changelog {_where(exc.tp)}: {exc.reason}"
            ) from exc
        for part in parts:
            part.finish()


def _mark_full(job: RestoreJob, failure: Exception) -> None:
    job.full, job.reason = True, f"inconsistent local state: {failure}; restoring fully"


def _where(tp: tuple[str, int]) -> str:
    return f"{tp[0]}[{tp[1]}]"


class _ReadMustRestart(InconsistentStateError):
    """The log moved under a read (its start passed the read's position)."""


class _PartitionRestore:
    """One partition's restore while it is read: applies the records handed to :meth:`take`
    to the store up to the last commit marker, fencing stale epochs
    (:mod:`statekeeper.changelog.fencing`), in write batches of ``batch_records`` keys.
    A checkpoint the log contradicts sets :attr:`failed` and ignores the rest."""

    def __init__(
        self, restorer: ChangelogRestorer, outcome: RestoreOutcome, meta: StoreMetadata, high: int
    ) -> None:
        self.restorer = restorer
        self.job = outcome.job
        self.outcome = outcome
        self.tp = (self.job.topic, self.job.partition)
        self.where = _where(self.tp)
        self.meta = meta
        self.high = high
        self.verify_offset = meta.changelog_offset
        self.read_from = OFFSET_BEGINNING if self.verify_offset is None else self.verify_offset
        self.failed: InconsistentStateError | None = None
        # What markers closed waits here for the next write; the splitter holds what came
        # after the last marker.
        self.committed = CommittedRecords()
        self.splitter = CommitSplitter(self.where, self._on_commit, fence=meta.epoch)
        self._need_verify = self.verify_offset is not None
        self._started = 0.0

    def start(self) -> None:
        self.restorer.listener.on_restore_start(
            self.tp, self.job.store.name, self.outcome.start_offset, self.high
        )
        self._started = time.perf_counter()

    def take(self, msgs: list[Any], keys: list[bytes]) -> None:
        if self.failed is not None:
            return
        if self._need_verify:
            self._need_verify = False
            try:
                _verify_checkpoint(msgs, keys, self.verify_offset, self.meta, self.where)
            except InconsistentStateError as exc:
                self.failed = exc
                return
            if msgs[0].offset() == self.verify_offset:
                msgs, keys = msgs[1:], keys[1:]
        self.splitter.take(msgs, keys)

    def finish(self) -> None:
        if self.failed is None and self._need_verify:
            self.failed = InconsistentStateError(
                f"checkpointed offset {self.verify_offset} is beyond the end of changelog "
                f"{self.where}"
            )
        splitter, meta = self.splitter, self.meta
        late = splitter.unannounced_epochs() if self.verify_offset is not None else []
        if self.failed is None and late:
            self.failed = InconsistentStateError(
                f"local state's commit at {self.where} offset {self.verify_offset} (epoch "
                f"{meta.epoch}) was written after epoch {late[0]} had begun: a fenced "
                "writer's commit"
            )
        if self.failed is not None:
            return
        self._write_committed()
        outcome = self.outcome
        outcome.seconds = time.perf_counter() - self._started
        outcome.restored_bytes = splitter.bytes_read
        outcome.tail = list(splitter.pending.items())
        outcome.fence = splitter.fence
        outcome.fenced = splitter.fenced
        outcome.fenced_keys = splitter.fenced_keys
        self.restorer.listener.on_restore_end(
            self.tp, self.job.store.name, outcome.restored_records
        )

    def _write_committed(self) -> None:
        meta, count = self.committed.write_to(self.job.store)
        if meta is not None:
            self.outcome.restored_records += count
            self.restorer.listener.on_batch_restored(
                self.tp, self.job.store.name, self.outcome.marker_offset or 0, count
            )

    def _on_commit(
        self, closed: dict[bytes, bytes | None], count: int, marker: CommitMarker, offset: int
    ) -> None:
        self.outcome.last_marker, self.outcome.marker_offset = marker, offset
        if self.committed.add(closed, count, marker, offset) >= self.restorer.batch_records:
            self._write_committed()


def _verify_checkpoint(
    msgs: list[Any], keys: list[bytes], offset: int | None, meta: StoreMetadata, where: str
) -> None:
    """The checkpointed offset must hold our marker (or have been compacted away)."""
    first = msgs[0]
    if first.offset() != offset:
        return  # compacted: a later marker for the same key exists further on
    if not is_marker_key(keys[0]):
        raise InconsistentStateError(f"changelog {where} offset {offset} is not a commit marker")
    marker = CommitMarker.decode(first.value(), where=f"{where} offset {offset}")
    if meta.batch_id is not None and marker.batch_id != meta.batch_id:
        raise InconsistentStateError(
            f"changelog {where} offset {offset} commits batch {marker.batch_id}, local state "
            f"says batch {meta.batch_id}"
        )
