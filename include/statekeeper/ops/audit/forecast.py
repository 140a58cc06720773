"""Restore-time forecasts for a changelog: full replay vs newest snapshot + changelog tail.

Pure arithmetic over what the audit gathered: each partition's log start and end, the
app's snapshot manifests (their commit-marker offsets) and a restore rate. The rate is the
one the app's own restores measured when its status document has enough of them
(:func:`measured_restore_rate`), else a default; the forecast says which.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Full-restore rate assumed when nothing was measured, records/s: the measured full restore
#: of docs/benchmarks.md (1M records, 4 partitions, embedded broker, 2 cores: 570-680k/s)
#: rounded down. A default, not a measurement of the audited cluster.
DEFAULT_RESTORE_RATE = 550_000.0
#: Restores in the status document must total at least this many records to count as a
#: measured rate: a restore of a few hundred records is all fixed cost.
MIN_MEASURED_RECORDS = 10_000

TP = tuple[str, int]


@dataclass(frozen=True)
class RestoreRate:
    """Records/s a forecast uses and where that figure comes from (``source``:
    ``measured``, ``given`` or ``default``; ``detail`` says from what)."""

    records_per_s: float
    source: str
    detail: str


def measured_restore_rate(
    status_file: Path, min_records: int = MIN_MEASURED_RECORDS
) -> RestoreRate | None:
    """The rate of the restores the app's status document lists (``tasks.*.restore``:
    records and seconds per store), or None when it has fewer than ``min_records`` records
    restored (or no status document)."""
    try:
        status = json.loads(Path(status_file).read_text())
    except (OSError, ValueError):
        return None
    records = 0
    seconds = 0.0
    restores = 0
    for task in (status.get("tasks") or {}).values():
        for entry in task.get("restore") or []:
            got, took = entry.get("records") or 0, entry.get("seconds") or 0.0
            if got > 0 and took > 0:
                records, seconds, restores = records + got, seconds + took, restores + 1
    if records < min_records or seconds <= 0:
        return None
    return RestoreRate(
        records / seconds,
        "measured",
        f"{restores} restore(s) in {status_file}: {records} records in {seconds:.3g} s",
    )


def choose_restore_rate(given: float | None, status_file: Path | None) -> RestoreRate:
    """``given`` (the operator's figure), else the app's measured rate, else the default."""
    if given is not None:
        if given <= 0:
            raise ValueError(f"restore rate must be > 0 records/s, got {given}")
        return RestoreRate(given, "given", "--restore-rate")
    if status_file is not None:
        measured = measured_restore_rate(status_file)
        if measured is not None:
            return measured
    where = f" (no status document with >= {MIN_MEASURED_RECORDS} restored records"
    where += f" at {status_file})" if status_file is not None else ")"
    return RestoreRate(
        DEFAULT_RESTORE_RATE, "default", "embedded-broker full restore, docs/benchmarks.md" + where
    )


@dataclass(frozen=True)
class PartitionForecast:
    """One changelog partition: its offsets and the newest snapshot's marker."""

    partition: int
    log_start: int
    log_end: int
    snapshot_id: str | None = None
    marker_offset: int | None = None
    snapshot_created_at: str | None = None

    @property
    def full_records(self) -> int:
        """Offsets a full replay reads (an upper bound once compaction left gaps)."""
        return max(self.log_end - self.log_start, 0)

    @property
    def tail_records(self) -> int:
        """Offsets after the newest snapshot's marker (all of them without a snapshot)."""
        if self.marker_offset is None:
            return self.full_records
        return min(max(self.log_end - (self.marker_offset + 1), 0), self.full_records)


@dataclass
class RestoreForecast:
    """Full replay vs newest snapshot + tail for one changelog topic."""

    rate: RestoreRate
    partitions: list[PartitionForecast] = field(default_factory=list)
    #: records a full replay reads, when the audit counted them (else the offset span)
    measured_records: int | None = None

    @property
    def full_records(self) -> int:
        span = sum(p.full_records for p in self.partitions)
        return self.measured_records if self.measured_records is not None else span

    @property
    def tail_records(self) -> int:
        return min(sum(p.tail_records for p in self.partitions), self.full_records)

    @property
    def snapshot_coverage(self) -> int:
        """Partitions with a snapshot to start from."""
        return sum(p.snapshot_id is not None for p in self.partitions)

    @property
    def full_restore_seconds(self) -> float:
        return self.full_records / self.rate.records_per_s

    @property
    def snapshot_tail_seconds(self) -> float:
        """Replay time of the tails only; downloading the snapshot is not included."""
        return self.tail_records / self.rate.records_per_s

    @property
    def cut_records(self) -> int:
        """What restoring from the newest snapshots saves over a full replay."""
        return self.full_records - self.tail_records

    @property
    def fresh_snapshot_cut_records(self) -> int:
        """What a snapshot taken now would cut from the next restore: every record behind the
        newest snapshot's marker (the whole log where there is none)."""
        return self.tail_records

    def to_dict(self) -> dict[str, Any]:
        return {
            "restore_rate": asdict(self.rate),
            "full_records": self.full_records,
            "tail_records": self.tail_records,
            "full_restore_seconds": round(self.full_restore_seconds, 4),
            "snapshot_tail_seconds": round(self.snapshot_tail_seconds, 4),
            "snapshot_cut_records": self.cut_records,
            "fresh_snapshot_cut_records": self.fresh_snapshot_cut_records,
            "partitions_with_snapshot": self.snapshot_coverage,
            "partitions": [
                {**asdict(p), "full_records": p.full_records, "tail_records": p.tail_records}
                for p in self.partitions
            ],
        }


def newest_markers(manifests: Iterable[Any], topic: str) -> dict[int, Any]:
    """Per partition of ``topic``, the newest snapshot manifest that has a marker offset."""
    newest: dict[int, Any] = {}
    for manifest in manifests:
        if manifest.changelog_topic != topic or manifest.marker_offset is None:
            continue
        current = newest.get(manifest.changelog_partition)
        if current is None or manifest.marker_offset > current.marker_offset:
            newest[manifest.changelog_partition] = manifest
    return newest


def kept_markers(manifests: Iterable[Any]) -> dict[TP, list[int]]:
    """Every kept snapshot's marker offset per changelog partition."""
    markers: dict[TP, list[int]] = defaultdict(list)
    for manifest in manifests:
        if manifest.changelog_topic is not None and manifest.marker_offset is not None:
            markers[(manifest.changelog_topic, manifest.changelog_partition)].append(
                manifest.marker_offset
            )
    return dict(markers)


def forecast_topic(
    topic: str,
    log_starts: Mapping[int, int],
    log_ends: Mapping[int, int],
    manifests: Iterable[Any],
    rate: RestoreRate,
    measured_records: int | None = None,
) -> RestoreForecast:
    """The forecast for ``topic`` from its partitions' offsets and the app's manifests."""
    newest = newest_markers(manifests, topic)
    partitions = []
    for partition in sorted(log_ends):
        manifest = newest.get(partition)
        partitions.append(
            PartitionForecast(
                partition,
                log_starts.get(partition, 0),
                log_ends[partition],
                manifest.snapshot_id if manifest else None,
                manifest.marker_offset if manifest else None,
                manifest.created_at if manifest else None,
            )
        )
    return RestoreForecast(rate, partitions, measured_records)
