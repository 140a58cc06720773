"""Rebuilds stores from their changelog partitions, up to the last commit marker.

Reads each partition to EOF (invariant 5) with the shared
:class:`~statekeeper.kafka.partition_reader.PartitionReader`, applies only records that a
commit marker closes (invariant 2) in bounded write batches, and hands back the uncommitted
tail so the task state manager can decide to drop it or roll it forward. Several partitions
restore in parallel threads; librdkafka fetches outside the GIL.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer

from statekeeper.changelog.fencing import CommitSplitter, FenceCounts, is_marker_key
from statekeeper.changelog.listeners import BaseRestoreListener, StateRestoreListener
from statekeeper.changelog.records import CommitMarker
from statekeeper.errors import (
    BrokerUnavailableError,
    ChangelogCorruptError,
    ChangelogTopicError,
    ChangelogTrimmedError,
)
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
        threads: int = 4,
        timeout_s: float = 15.0,
        listener: StateRestoreListener | None = None,
    ) -> None:
        self._consumer_config = dict(consumer_config)
        self.batch_records = batch_records
        self.threads = threads
        self.timeout_s = timeout_s
        self.listener: StateRestoreListener = listener or BaseRestoreListener()

    def restore_all(self, jobs: list[RestoreJob]) -> list[RestoreOutcome]:
        """Restore every job, ``threads`` partitions at a time; results in job order."""
        if len(jobs) <= 1 or self.threads == 1:
            return [self.restore(job) for job in jobs]
        with ThreadPoolExecutor(max_workers=min(self.threads, len(jobs))) as pool:
            return list(pool.map(self.restore, jobs))

    def restore(self, job: RestoreJob) -> RestoreOutcome:
        tp = (job.topic, job.partition)
        if not job.full:
            try:
                return self._restore_from(job, job.store.read_metadata())
            except InconsistentStateError as exc:
                job.full, job.reason = True, f"inconsistent local state: {exc}; restoring fully"
        if job.reason:
            self.listener.on_restore_reason(tp, job.store.name, job.reason)
        job.store.wipe()
        return self._restore_from(job, StoreMetadata())

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

    # -- one partition ---------------------------------------------------------------------

    def _restore_from(self, job: RestoreJob, meta: StoreMetadata) -> RestoreOutcome:
        tp = (job.topic, job.partition)
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
        consumer = eof_consumer(self._consumer_config, "restore")
        try:
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
            # A partial restore re-reads the checkpointed marker to verify it.
            starts = {tp: OFFSET_BEGINNING if checkpoint is None else checkpoint}
            assign_at(consumer, starts)
            self.listener.on_restore_start(tp, store_name, outcome.start_offset, high)
            started = time.perf_counter()
            # The high watermark sizes each consume() so a short tail (the usual restart)
            # returns at once; a trailing one only means another round.
            reader = PartitionReader(
                consumer, starts, size_hints={tp: high}, timeout_s=self.timeout_s, keyed=True
            )
            self._apply(reader, job, outcome, verify_offset=checkpoint, meta=meta)
            outcome.seconds = time.perf_counter() - started
        finally:
            consumer.close()
        self.listener.on_restore_end(tp, store_name, outcome.restored_records)
        return outcome

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

    def _apply(
        self,
        reader: PartitionReader,
        job: RestoreJob,
        outcome: RestoreOutcome,
        *,
        verify_offset: int | None,
        meta: StoreMetadata,
    ) -> None:
        """Apply the records ``reader`` reads to the store, up to the last commit marker,
        fencing stale epochs (:mod:`statekeeper.changelog.fencing`)."""
        where = f"{job.topic}[{job.partition}]"
        tp = (job.topic, job.partition)
        # Records are deduplicated by key as they arrive: values are absolute (invariant 1),
        # so only the last one per key matters. `committed` is closed by a marker and waits
        # to be written; the splitter holds what came after the last marker.
        committed: dict[bytes, bytes | None] = {}
        committed_count = 0  # records (not keys) behind `committed`
        pending_meta: StoreMetadata | None = None
        need_verify = verify_offset is not None

        def write_committed() -> None:
            nonlocal committed, committed_count, pending_meta
            if committed or pending_meta is not None:
                job.store.restore_batch(list(committed.items()), pending_meta)
                outcome.restored_records += committed_count
                self.listener.on_batch_restored(
                    tp, job.store.name, outcome.marker_offset or 0, committed_count
                )
            committed, committed_count, pending_meta = {}, 0, None

        def on_commit(
            closed: dict[bytes, bytes | None], count: int, marker: CommitMarker, offset: int
        ) -> None:
            nonlocal committed, committed_count, pending_meta
            if committed:
                committed.update(closed)
            else:
                committed = closed
            committed_count += count
            outcome.last_marker, outcome.marker_offset = marker, offset
            pending_meta = StoreMetadata(
                changelog_offset=offset,
                batch_id=marker.batch_id,
                source_offsets=marker.source_offsets,
                epoch=marker.epoch,
            )
            if len(committed) >= self.batch_records:
                write_committed()

        splitter = CommitSplitter(where, on_commit, fence=meta.epoch)
        try:
            for _, msgs, keys in reader:
                assert keys is not None  # a keyed read
                if need_verify:
                    need_verify = False
                    self._verify_checkpoint(msgs, keys, verify_offset, meta, where)
                    if msgs[0].offset() == verify_offset:
                        msgs, keys = msgs[1:], keys[1:]
                splitter.take(msgs, keys)
        except PartitionMissingError as exc:
            raise ChangelogTopicError(
                f"changelog {where} does not exist: {exc.reason}; create the app's changelog "
                "topics (statekeeper creates them at start) or fix the name"
            ) from exc
        except OffsetOutOfRangeError as exc:
            raise InconsistentStateError(
                f"checkpointed offset is outside changelog {where}: {exc.reason}"
            ) from exc
        except NullKeyError as exc:
            raise ChangelogCorruptError(
                f"changelog {where} offset {exc.offset} has a null key; changelog records "
                "always carry the store key (was something else producing to this topic?)"
            ) from exc
        except ReadStalledError as exc:
            raise BrokerUnavailableError(
                f"changelog {where}: no data and no end-of-partition within "
                f"{self.timeout_s:.0f} s (broker unreachable?)"
            ) from exc
        except PartitionFetchError as exc:
            raise BrokerUnavailableError(f"reading changelog {where}: {exc.reason}") from exc
        if need_verify:
            raise InconsistentStateError(
                f"checkpointed offset {verify_offset} is beyond the end of changelog {where}"
            )
        if verify_offset is not None and (late := splitter.unannounced_epochs()):
            raise InconsistentStateError(
                f"local state's commit at {where} offset {verify_offset} (epoch {meta.epoch}) "
                f"was written after epoch {late[0]} had begun: a fenced writer's commit"
            )
        write_committed()
        outcome.restored_bytes = splitter.bytes_read
        outcome.tail = list(splitter.pending.items())
        outcome.fence = splitter.fence
        outcome.fenced = splitter.fenced
        outcome.fenced_keys = splitter.fenced_keys

    @staticmethod
    def _verify_checkpoint(
        msgs: list[Any],
        keys: list[bytes],
        offset: int | None,
        meta: StoreMetadata,
        where: str,
    ) -> None:
        """The checkpointed offset must hold our marker (or have been compacted away)."""
        first = msgs[0]
        if first.offset() != offset:
            return  # compacted: a later marker for the same key exists further on
        if not is_marker_key(keys[0]):
            raise InconsistentStateError(
                f"changelog {where} offset {offset} is not a commit marker"
            )
        marker = CommitMarker.decode(first.value(), where=f"{where} offset {offset}")
        if meta.batch_id is not None and marker.batch_id != meta.batch_id:
            raise InconsistentStateError(
                f"changelog {where} offset {offset} commits batch {marker.batch_id}, local state "
                f"says batch {meta.batch_id}"
            )
