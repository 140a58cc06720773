"""Read-only views of a task's persistent store, as of its last commit, from another process.

The active task (or a standby updater) keeps the store's RocksDB open for writing; a second
read-write open would fail on RocksDB's ``LOCK``. A view is a RocksDB *secondary* instance
(``AccessType.secondary``): it takes no lock, writes only its own info log (in a directory of
ours), and follows the primary with ``try_catch_up_with_primary``, which replays the
primary's MANIFEST and WAL. Statekeeper writes a store only at commits and restores, each
as one WriteBatch holding data and metadata (invariant 3), and a secondary applies a
WriteBatch whole, so a caught-up view always holds a committed state.

Measured (2 cores, a writer committing 2,000 keys every 20 ms in another process): opening
a secondary 33 ms; a catch-up 6 ms p50 / 14 ms p99 with writes pending and 2 ms with none
(it re-reads the MANIFEST); a point get ~1 us. A read-only open instead costs ~300 ms per
open under the same load (it replays the whole WAL) and sees nothing newer, and RocksDB
snapshots are not honoured by a secondary (a snapshot read after a catch-up returned the
new value). So a view catches up only when the primary's files changed (a ~50 us scan of
the WAL and MANIFEST sizes), and a read/write lock keeps each answer on one state: reads
share it, a catch-up takes it alone (it waits for reads in flight, never for the writer).

One wrinkle: opening any rocksdict handle rewrites ``rocksdict-config.json`` in the
database directory; with our options its content is byte-identical to the primary's, and
the primary never reads it (statekeeper always passes explicit options).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rocksdict

from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.rocksdb import META_CF
from statekeeper.stores.window_bytes import WindowBytesStore

log = logging.getLogger("statekeeper.query")

_META_CHANGELOG_OFFSET = b"changelog_offset"
_META_BATCH_ID = b"batch_id"
_META_SOURCE_OFFSETS = b"source_offsets"
# Files whose size or mtime move when the primary writes: the WAL (every commit), the
# MANIFEST and CURRENT (flushes, compactions), IDENTITY (a wiped and recreated store).
_WATCHED_SUFFIXES = (".log",)
_WATCHED_PREFIXES = ("MANIFEST-", "CURRENT", "IDENTITY")


class CopyUnavailableError(Exception):
    """The store has no readable committed copy here (no directory yet, being recreated)."""


@dataclass(frozen=True)
class CopyState:
    """What one view holds right now: the last commit's metadata (``batch_id`` None: the
    directory holds no committed batch yet)."""

    changelog_offset: int | None
    batch_id: int | None
    source_offsets: dict[str, int] = field(default_factory=dict)

    @property
    def committed(self) -> bool:
        return self.batch_id is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "changelog_offset": self.changelog_offset,
            "batch_id": self.batch_id,
            "source_offsets": dict(self.source_offsets),
        }


class ReadWriteLock:
    """Many readers or one writer; a waiting writer holds new readers back (no starvation)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            while self._writer or self._readers:
                self._cond.wait()
            self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class SecondaryKeyValueReader:
    """The read side of a key-value byte store over a secondary handle: what
    :class:`WindowBytesStore` needs (``get``, ``range``, ``approximate_num_entries``), so
    window reads decode the on-disk layout with the store's own code."""

    persistent = True

    def __init__(self, db: rocksdict.Rdict) -> None:
        self._db = db

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key <= end`` (either bound None: open), in key order."""
        if reverse:
            raise NotImplementedError("query views scan forwards only")
        it = self._db.iter()
        it.seek(start) if start is not None else it.seek_to_first()
        while it.valid():
            key = it.key()
            if end is not None and key > end:
                return
            yield key, it.value()
            it.next()

    def after(self, start: bytes | None, exclusive: bool) -> Iterator[tuple[bytes, bytes]]:
        """Entries from ``start`` on (past it when ``exclusive``), to the end."""
        it = self._db.iter()
        it.seek(start) if start is not None else it.seek_to_first()
        if exclusive and it.valid() and it.key() == start:
            it.next()
        while it.valid():
            yield it.key(), it.value()
            it.next()

    def approximate_num_entries(self) -> int:
        return int(self._db.property_int_value("rocksdb.estimate-num-keys") or 0)


def _options() -> rocksdict.Options:
    opts = rocksdict.Options(raw_mode=True)
    # A secondary must keep every table file open: the primary deletes files that
    # compactions made obsolete, and an open descriptor keeps them readable until the next
    # catch-up moves the view past them (RocksDB requires -1 for secondaries).
    opts.set_max_open_files(-1)
    opts.set_keep_log_file_num(1)
    return opts


class StoreCopy:
    """A read-only view of one task's store directory (see the module docstring).

    ``window``: the store's window geometry ``(retention_ms, window_size_ms)`` for window
    stores, None for key-value stores.
    """

    _serial = itertools.count()

    def __init__(
        self,
        name: str,
        path: Path,
        scratch_dir: Path,
        window: tuple[int, int] | None = None,
    ) -> None:
        self.name = name
        self.path = Path(path)
        self.scratch_dir = Path(scratch_dir)
        self.window = window
        self._lock = ReadWriteLock()
        self._refresh_mutex = threading.Lock()
        self._db: rocksdict.Rdict | None = None
        self._meta: rocksdict.Rdict | None = None
        self._secondary_path: Path | None = None
        self._identity: tuple[int, int] | None = None
        self._signature: tuple[Any, ...] | None = None
        self._state = CopyState(None, None)
        self._window_store: WindowBytesStore | None = None
        self.catch_ups = 0
        self.reopens = 0
        self._closed = False

    # -- following the primary -------------------------------------------------------------

    def _files_signature(self) -> tuple[tuple[Any, ...], tuple[int, int] | None]:
        """(size and mtime of the files the primary's writes move, IDENTITY's inode)."""
        entries = []
        identity = None
        try:
            with os.scandir(self.path) as scan:
                for entry in scan:
                    name = entry.name
                    if name.endswith(_WATCHED_SUFFIXES) or name.startswith(_WATCHED_PREFIXES):
                        st = entry.stat()
                        entries.append((name, st.st_ino, st.st_size, st.st_mtime_ns))
                        if name == "IDENTITY":
                            identity = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            return (), None
        entries.sort()
        return tuple(entries), identity

    def refresh(self) -> None:
        """Catch up with the primary if its files changed since the last catch-up; reopen
        when the store was wiped and recreated. Only one thread refreshes at a time; others
        go on reading the state the view holds (they never wait for a refresh in progress).
        Raises :class:`CopyUnavailableError` when there is no copy to open."""
        if not self._refresh_mutex.acquire(blocking=False):
            if self._db is None:
                with self._refresh_mutex:  # the first open: wait for it
                    pass
                if self._db is None:
                    raise CopyUnavailableError(f"no readable copy of {self.name} at {self.path}")
            return
        try:
            if self._closed:
                raise CopyUnavailableError(f"view of {self.name} is closed")
            signature, identity = self._files_signature()
            if identity is None:
                with self._lock.exclusive():
                    self._close_handles()
                raise CopyUnavailableError(f"no copy of store {self.name} at {self.path}")
            if signature == self._signature and self._db is not None:
                return
            with self._lock.exclusive():
                if self._db is None or identity != self._identity:
                    self._reopen(identity)
                else:
                    try:
                        self._db.try_catch_up_with_primary()
                        self.catch_ups += 1
                    except Exception as exc:  # rocksdict raises plain Exception
                        log.info("query view %s: catch-up failed (%s); reopening", self.path, exc)
                        self._reopen(identity)
                self._load_state()
                self._signature = signature
        finally:
            self._refresh_mutex.release()

    def _reopen(self, identity: tuple[int, int] | None) -> None:
        self._close_handles()
        secondary = self.scratch_dir / f"{self.name}-{next(self._serial)}"
        secondary.mkdir(parents=True, exist_ok=True)
        try:
            db = rocksdict.Rdict(
                str(self.path),
                _options(),
                column_families={META_CF: _options()},
                access_type=rocksdict.AccessType.secondary(str(secondary)),
            )
        except Exception as exc:  # a directory being created or removed right now
            shutil.rmtree(secondary, ignore_errors=True)
            raise CopyUnavailableError(
                f"cannot open the copy of store {self.name} at {self.path}: {exc}"
            ) from exc
        self._db, self._secondary_path = db, secondary
        self._meta = db.get_column_family(META_CF)
        self._identity = identity
        self.reopens += 1

    def _load_state(self) -> None:
        assert self._db is not None and self._meta is not None
        offset = self._meta.get(_META_CHANGELOG_OFFSET)
        batch_id = self._meta.get(_META_BATCH_ID)
        sources = self._meta.get(_META_SOURCE_OFFSETS)
        try:
            self._state = CopyState(
                changelog_offset=int(offset) if offset is not None else None,
                batch_id=int(batch_id) if batch_id is not None else None,
                source_offsets={str(k): int(v) for k, v in json.loads(sources).items()}
                if sources
                else {},
            )
        except (ValueError, AttributeError) as exc:
            raise CopyUnavailableError(
                f"store {self.name} at {self.path} has unreadable metadata: {exc}"
            ) from exc
        if self.window is not None:
            retention_ms, size_ms = self.window
            # Reads the observed stream time once: fetches then clip to retention as the
            # task's own store does.
            self._window_store = WindowBytesStore(
                self.name,
                SecondaryKeyValueReader(self._db),
                retention_ms=retention_ms,
                window_size_ms=size_ms,
            )

    def _close_handles(self) -> None:
        self._window_store = None
        if self._meta is not None:
            self._meta.close()
        if self._db is not None:
            self._db.close()
        self._db = self._meta = None
        self._signature = None
        self._state = CopyState(None, None)
        if self._secondary_path is not None:
            shutil.rmtree(self._secondary_path, ignore_errors=True)
            self._secondary_path = None

    # -- reading ---------------------------------------------------------------------------

    @contextmanager
    def reading(self) -> Iterator[CopyReader]:
        """A consistent read of the view (no catch-up runs until the block ends)."""
        with self._lock.shared():
            if self._db is None:
                raise CopyUnavailableError(f"no readable copy of store {self.name} here")
            yield CopyReader(SecondaryKeyValueReader(self._db), self._state, self._window_store)

    @property
    def state(self) -> CopyState:
        return self._state

    def close(self) -> None:
        with self._refresh_mutex, self._lock.exclusive():
            self._closed = True
            self._close_handles()


@dataclass(frozen=True)
class CopyReader:
    """One consistent read: key-value access, the window store (window stores) and the
    metadata of the commit they show."""

    kv: SecondaryKeyValueReader
    state: CopyState
    window: WindowBytesStore | None

    def metadata(self) -> StoreMetadata:
        s = self.state
        return StoreMetadata(s.changelog_offset, s.batch_id, dict(s.source_offsets))
