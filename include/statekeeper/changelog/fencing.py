"""Epoch fencing on a changelog partition: the one rule every changelog reader applies.

Every record a task writes to a changelog carries the writer's task epoch in a header, and
so do its commit markers and the *begin* record a task writes when it opens a partition
under an epoch (docs/fencing.md). A process that froze and resumed can still write, so the
log itself is the authority:

- the partition's *fence* is the highest epoch seen so far in it (a begin record, a marker
  or a data record of a higher epoch raises it);
- a record or marker of an epoch below the fence (other than 0) is **fenced**: ignored and
  counted;
- a marker of the fence's epoch commits every record not fenced since the previous marker
  (records of an older epoch written *before* the fence rose are the uncommitted tail the
  new owner found at its open; it reverts or rolls them forward with records of its own
  epoch before its first marker, so they commit as the new owner decided).

A new owner writes its begin record *before* it reads the partition to the end, so anything
an older epoch writes after that point is fenced, whatever the interleaving. Begin records
have a key of their own per open (compaction never removes one) and markers a key per epoch
(compaction keeps each epoch's last marker, so a zombie's marker can never compact away the
new owner's). Records without an epoch header are epoch 0: logs written before fencing read
exactly as they did, and epoch 0 is never fenced: it is what operator tools write when they
open a stopped app's task (``statekeeper restore``, a redeploy from a snapshot), which settle
its tail as they always did.

:class:`CommitSplitter` applies the rule to one partition's records in offset order; the
restorer, the standby tail, drills, the snapshot installer's tail replay and the audit all
read through it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress, islice, repeat
from operator import methodcaller, ne
from typing import Any

from statekeeper.changelog.records import MARKER_KEY, CommitMarker
from statekeeper.errors import ChangelogCorruptError, StatekeeperError
from statekeeper.stores.change_logging import RESERVED_KEY_PREFIX

#: Header names: a data record's epoch, a commit marker's epoch, a begin record's epoch.
EPOCH_HEADER = "sk.epoch"
MARKER_HEADER = "sk.marker"
BEGIN_HEADER = "sk.begin"
BEGIN_KEY_PREFIX = RESERVED_KEY_PREFIX + b"begin@"

Headers = list[tuple[str, bytes]]

_headers = methodcaller("headers")
_value = methodcaller("value")


class StaleEpochError(StatekeeperError):
    """A task's epoch is older than its changelog's fence: another owner took the task over
    (this process was frozen or cut off), so it must stop without writing."""

    def __init__(self, message: str, *, epoch: int, fence: int) -> None:
        super().__init__(message)
        self.epoch = epoch
        self.fence = fence


def record_headers(epoch: int) -> Headers | None:
    """Headers of a data record written under ``epoch`` (None for epoch 0: unfenced)."""
    return [(EPOCH_HEADER, b"%d" % epoch)] if epoch else None


def marker_headers(epoch: int) -> Headers | None:
    return [(MARKER_HEADER, b"%d" % epoch)] if epoch else None


def marker_key(epoch: int) -> bytes:
    """One marker key per epoch: compaction keeps every epoch's newest marker."""
    return MARKER_KEY + b"@%d" % epoch if epoch else MARKER_KEY


def begin_record(epoch: int) -> tuple[bytes, bytes, Headers]:
    """(key, value, headers) of the record an owner writes when it opens a partition under
    ``epoch``; the key is unique, so compaction never removes it."""
    key = BEGIN_KEY_PREFIX + b"%d." % epoch + uuid.uuid4().hex[:12].encode()
    return key, b"%d" % epoch, [(BEGIN_HEADER, b"%d" % epoch)]


def is_marker_key(key: bytes) -> bool:
    return key == MARKER_KEY or key.startswith(MARKER_KEY + b"@")


def is_control_key(key: bytes | None) -> bool:
    """Markers and begin records: never store data."""
    return key is not None and key.startswith(RESERVED_KEY_PREFIX)


def classify(key: bytes, headers: Headers | None) -> tuple[str, int]:
    """``("data" | "marker" | "begin", epoch)`` of one changelog record."""
    if headers:
        for name, raw in headers:
            if name == EPOCH_HEADER:
                return "data", int(raw)
            if name == MARKER_HEADER:
                return "marker", int(raw)
            if name == BEGIN_HEADER:
                return "begin", int(raw)
    if key == MARKER_KEY:
        return "marker", 0
    if key.startswith(BEGIN_KEY_PREFIX):
        return "begin", 0
    return "data", 0


@dataclass
class FenceCounts:
    """What fencing dropped on one partition."""

    records: int = 0
    markers: int = 0

    def __iadd__(self, other: FenceCounts) -> FenceCounts:
        self.records += other.records
        self.markers += other.markers
        return self

    @property
    def total(self) -> int:
        return self.records + self.markers


#: Called for each marker that commits: (records it commits, how many records they were
#: before deduplication by key, the marker, its offset). The dict is handed over.
OnCommit = Callable[[dict[bytes, bytes | None], int, CommitMarker, int], None]


class CommitSplitter:
    """Sorts one changelog partition's records, fed in offset order, into what markers commit
    (reported through ``on_commit``) and the uncommitted tail (:attr:`pending`), fencing
    stale epochs (module docstring).

    ``fence``: the epoch the read starts under (a partial read resumes from a store whose
    last marker had this epoch). A writer whose epoch is below :attr:`fence` after reading
    to the end is stale.
    """

    def __init__(self, where: str, on_commit: OnCommit, fence: int = 0) -> None:
        self.where = where
        self.fence = fence
        self.on_commit = on_commit
        self.pending: dict[bytes, bytes | None] = {}
        self.pending_count = 0
        self.fenced = FenceCounts()
        #: Keys of the fenced data records: their newest record in the log is a fenced one,
        #: so the owner logs their committed value again (compaction must not keep a fenced
        #: value as the key's last word).
        self.fenced_keys: set[bytes] = set()
        self.bytes_read = 0  # keys and values
        #: Epochs that raised the fence during this read, and those whose begin record it saw.
        self.raised: list[int] = []
        self.begun: set[int] = set()
        self._current = record_headers(fence)

    def take(self, msgs: list[Any], keys: list[bytes]) -> None:
        """Consecutive records of the partition (events removed), their keys alongside."""
        n = len(msgs)
        if not n:
            return
        hdrs = list(map(_headers, msgs))
        values = list(map(_value, msgs))
        self.bytes_read += sum(map(len, keys)) + sum(map(len, filter(None, values)))
        start = 0
        while start < n:
            # Specials are found against the current epoch's header: when one raises the
            # fence, the rest of the run is looked at again against the new one.
            fence = self.fence
            for idx in self._specials(hdrs, keys, start):
                if idx > start:
                    self._add(keys, values, start, idx)
                self._special(msgs[idx], keys[idx], values[idx], hdrs[idx])
                start = idx + 1
                if self.fence != fence:
                    break
            else:
                if start < n:
                    self._add(keys, values, start, n)
                return

    def _specials(self, hdrs: list[Any], keys: list[bytes], start: int) -> list[int]:
        """Positions from ``start`` on of records that are not data of the current epoch
        (markers, begins, other epochs), found at C speed without copying the run: most
        chunks hold only a few."""
        found = list(
            compress(
                range(start, len(hdrs)), map(ne, islice(hdrs, start, None), repeat(self._current))
            )
        )
        if self._current is None:
            # Unstamped (epoch 0) markers look like data by their headers.
            at = start
            try:
                while True:
                    idx = keys.index(MARKER_KEY, at)
                    found.append(idx)
                    at = idx + 1
            except ValueError:
                pass
            if len(found) > 1:
                found = sorted(set(found))
        return found

    def _add(self, keys: list[bytes], values: list[Any], start: int, end: int) -> None:
        if start == 0 and end == len(keys):
            self.pending.update(zip(keys, values, strict=True))
        else:
            self.pending.update(zip(keys[start:end], values[start:end], strict=True))
        self.pending_count += end - start

    def _raise(self, epoch: int) -> None:
        self.fence = epoch
        self.raised.append(epoch)
        self._current = record_headers(epoch)

    def unannounced_epochs(self) -> list[int]:
        """Epochs that raised the fence without their begin record being read: their owner
        began *before* where this read started, so a commit at the start of the read (a local
        copy's checkpoint) was written by an older epoch after it had been fenced."""
        return [e for e in self.raised if e not in self.begun]

    def _special(self, msg: Any, key: bytes, value: bytes | None, headers: Any) -> None:
        kind, epoch = classify(key, headers)
        if 0 < epoch < self.fence:
            if kind == "marker":
                self.fenced.markers += 1
            elif kind == "data":
                self.fenced.records += 1
                self.fenced_keys.add(key)
            return
        if epoch > self.fence:
            self._raise(epoch)
        if kind == "begin":
            self.begun.add(epoch)
        elif kind == "data":
            self.pending[key] = value
            self.pending_count += 1
        elif kind == "marker":
            offset = msg.offset()
            marker = CommitMarker.decode(value, where=f"{self.where} offset {offset}")
            if marker.epoch != epoch:
                raise ChangelogCorruptError(
                    f"commit marker at {self.where} offset {offset} says epoch {marker.epoch} "
                    f"but its header says {epoch}"
                )
            closed, count = self.pending, self.pending_count
            self.pending, self.pending_count = {}, 0
            self.on_commit(closed, count, marker, offset)

    def drop_pending(self) -> None:
        self.pending, self.pending_count = {}, 0
