"""What commit markers closed on one changelog partition and no store write has applied yet.

The restorer and the standby tail both collect it between writes: the newest value per key
(values are absolute, invariant 1, so only the last one matters), how many records that
was, and the newest marker's metadata, which goes into the same write as the records.
"""

from __future__ import annotations

from typing import Any

from statekeeper.changelog.records import CommitMarker
from statekeeper.stores.base import StoreMetadata


class CommittedRecords:
    """Records closed by markers, waiting for one store write (module docstring)."""

    def __init__(self) -> None:
        self.records: dict[bytes, bytes | None] = {}
        self.count = 0  # records (not keys) behind `records`
        self.meta: StoreMetadata | None = None

    def add(
        self, closed: dict[bytes, bytes | None], count: int, marker: CommitMarker, offset: int
    ) -> int:
        """Take what the marker at ``offset`` closed (the dict is handed over); returns the
        number of keys now waiting."""
        if self.records:
            self.records.update(closed)
        else:
            self.records = closed
        self.count += count
        self.meta = StoreMetadata(
            changelog_offset=offset,
            batch_id=marker.batch_id,
            source_offsets=marker.source_offsets,
            epoch=marker.epoch,
        )
        return len(self.records)

    def write_to(self, store: Any) -> tuple[StoreMetadata | None, int]:
        """Apply what waits to ``store`` (records and metadata in one write) and start
        afresh; returns the metadata written (None: nothing waited) and the record count."""
        meta, count = self.meta, self.count
        if meta is not None:
            store.restore_batch(list(self.records.items()), meta)
        self.records, self.count, self.meta = {}, 0, None
        return meta, count
