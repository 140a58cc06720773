"""Read-only views of a task's persistent store, as of its last commit, from another process.

The active task (or a standby updater) keeps the store's RocksDB open for writing; a second
read-write open would fail on RocksDB's ``LOCK``. A view is a RocksDB *secondary* instance
(``AccessType.secondary``): it takes no lock, writes only its own info log (in a directory of
ours), and follows the primary with ``try_catch_up_with_primary``, which replays the
primary's MANIFEST and WAL. Statekeeper writes a store only at commits and restores, each
as one WriteBatch holding data and metadata (invariant 3), and a secondary applies a
WriteBatch whole, so a view that replayed the WAL holds a committed state.

That holds while the primary only appends to its WAL. After a flush or a compaction (the
MANIFEST moves) a caught-up secondary was seen answering a key from its own older memtable
entry while the primary's compaction output held the newer value with its sequence number
zeroed, next to the newer metadata: one commit's data under the next commit's offsets. So a
view catches up only when the WAL grew, and opens a fresh secondary (no stale memtable)
when the MANIFEST moved, beside the old one, swapping it in
(tests/unit/query/test_store_copies.py forces both).

Measured (2 cores, a writer committing 2,000 keys every 20 ms in another process): opening
a secondary 33 ms; a catch-up 6 ms p50 / 14 ms p99 with writes pending and 2 ms with none
(it re-reads the MANIFEST); a point get ~1 us. A read-only open instead costs ~300 ms per
open under the same load (it replays the whole WAL) and sees nothing newer, and RocksDB
snapshots are not honoured by a secondary (a snapshot read after a catch-up returned the
new value). So a view follows the primary only when its files changed (a few ``stat``
calls of the WAL, the MANIFEST and the directory: :mod:`statekeeper.query.store_files`),
and a read/write lock keeps each answer on one state: reads share it, a catch-up or a swap
takes it alone (it waits for reads in flight, never for the writer). Reads that arrive
while one thread follows the primary answer from the state the view holds only if it was
known current a moment ago (``max_staleness_s``); after a quiet spell they wait, so no
answer shows a commit long past.

One wrinkle: opening any rocksdict handle rewrites ``rocksdict-config.json`` in the
directory it opens, and a query must not write in a live task directory. So the secondary
opens a mirror of symbolic links to the live files (:mod:`statekeeper.query.link_mirror`),
synced before each open and catch-up.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rocksdict

from statekeeper.query.link_mirror import LinkMirror
from statekeeper.query.store_files import Files, StoreFiles
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.rocksdb import META_CF, decode_metadata, scan_range
from statekeeper.stores.window_bytes import WindowBytesStore

log = logging.getLogger("statekeeper.query")


class CopyUnavailableError(Exception):
    """The store has no readable committed copy here (no directory yet, being recreated)."""


class ReadWouldWaitError(Exception):
    """A read asked not to wait would have to: the view must first catch up, open, or wait
    for a catch-up in progress. The caller asks again from a thread that may wait."""


@dataclass(frozen=True)
class CopyState:
    """What one view holds right now: the last commit's metadata (``batch_id`` None: the
    directory holds no committed batch yet)."""

    changelog_offset: int | None
    batch_id: int | None
    source_offsets: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, meta: StoreMetadata) -> CopyState:
        """What a view shows of a commit's metadata."""
        return cls(meta.changelog_offset, meta.batch_id, dict(meta.source_offsets))

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
    def shared(self, wait: bool = True) -> Iterator[None]:
        """Held by many readers at once; ``wait=False`` raises :class:`ReadWouldWaitError`
        instead of waiting for a writer."""
        with self._cond:
            while self._writer or self._writers_waiting:
                if not wait:
                    raise ReadWouldWaitError("a catch-up holds the view")
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
        return scan_range(self._db, start, end)

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


#: One block cache for every view of the process (RocksDB would give each instance its own).
VIEW_BLOCK_CACHE_BYTES = 32 * 1024 * 1024
_view_cache: rocksdict.Cache | None = None
_view_cache_lock = threading.Lock()


def _block_cache() -> rocksdict.Cache:
    global _view_cache
    with _view_cache_lock:
        if _view_cache is None:
            _view_cache = rocksdict.Cache(VIEW_BLOCK_CACHE_BYTES)
        return _view_cache


def _options() -> rocksdict.Options:
    opts = rocksdict.Options(raw_mode=True)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(_block_cache())
    opts.set_block_based_table_factory(table)
    # A secondary must keep every table file open: the primary deletes files that
    # compactions made obsolete, and an open descriptor keeps them readable until the next
    # catch-up moves the view past them (RocksDB requires -1 for secondaries).
    opts.set_max_open_files(-1)
    opts.set_keep_log_file_num(1)
    return opts


class _Handle:
    """One secondary instance and what it showed at its last catch-up."""

    def __init__(self, db: rocksdict.Rdict, secondary_path: Path) -> None:
        self.db = db
        self.meta = db.get_column_family(META_CF)
        self.secondary_path = secondary_path

    def close(self) -> None:
        self.meta.close()
        self.db.close()
        shutil.rmtree(self.secondary_path, ignore_errors=True)


def enter_refresh(
    mutex: threading.Lock,
    has_view: bool,
    current_at: float,
    max_staleness_s: float,
    wait: bool,
    name: str,
) -> bool:
    """Take a view's refresh ``mutex``: True when this thread now follows the primary (and
    releases the mutex when done); False when another thread follows it and the view it has
    (``has_view``) may answer as it is, having been known current at ``current_at`` within
    ``max_staleness_s``. A reader that must wait for the follower waits, or with
    ``wait=False`` is refused (:class:`ReadWouldWaitError`)."""
    if mutex.acquire(blocking=False):
        return True
    if has_view and time.monotonic() - current_at <= max_staleness_s:
        return False
    if not wait:
        raise ReadWouldWaitError(f"the view of {name} is following the primary")
    mutex.acquire()
    return True


class StoreCopy:
    """A read-only view of one task's store directory (see the module docstring).

    ``window``: the store's window geometry ``(retention_ms, window_size_ms)`` for window
    stores, None for key-value stores. ``max_staleness_s``: how long after the view was last
    seen current a read may still be answered from it while another thread follows the
    primary (see :meth:`refresh`).

    WAL growth is followed by a catch-up; a moved MANIFEST (a flush, a compaction) by a new
    secondary opened beside the current one and swapped in, so reads wait only for the swap.
    """

    _serial = itertools.count()
    #: Opens retried while the MANIFEST keeps moving under them.
    OPEN_ATTEMPTS = 3

    def __init__(
        self,
        name: str,
        path: Path,
        scratch_dir: Path,
        window: tuple[int, int] | None = None,
        max_staleness_s: float = 0.25,
    ) -> None:
        self.name = name
        self.path = Path(path)
        self.scratch_dir = Path(scratch_dir)
        self.window = window
        self._store_files = StoreFiles(self.path)
        self._mirror = LinkMirror(
            self.path, self.scratch_dir / f"{name}-links-{next(self._serial)}"
        )
        self._lock = ReadWriteLock()
        self._refresh_mutex = threading.Lock()
        self._handle: _Handle | None = None
        self._seen: Files | None = None
        self._state = CopyState(None, None)
        self._window_store: WindowBytesStore | None = None
        self.max_staleness_s = max_staleness_s
        # When the view was last known to show the primary's last commit (the start of the
        # file scan that found nothing new): what a read during another thread's catch-up
        # may rely on.
        self._current_at = float("-inf")
        self.catch_ups = 0
        self.reopens = 0
        self._closed = False

    # -- following the primary -------------------------------------------------------------

    def refresh(self, wait: bool = True) -> None:
        """Follow the primary if its files changed since the view last did (see the class
        docstring). Raises :class:`CopyUnavailableError` when there is no copy to open.

        Only one thread refreshes at a time. The others read the state the view holds only
        if it was known to be the primary's last commit at most ``max_staleness_s`` ago
        (under a steady read load, a few ms): a read arriving after a quiet spell, while
        the first one back follows the primary, waits for it instead of answering from a
        commit long past, then checks the files itself.

        ``wait=False`` (a caller that must not block, e.g. an event loop) only checks: it
        raises :class:`ReadWouldWaitError` when the view has to catch up or open first."""
        if not enter_refresh(
            self._refresh_mutex,
            self._handle is not None,
            self._current_at,
            self.max_staleness_s,
            wait,
            self.name,
        ):
            return
        try:
            if self._closed:
                raise CopyUnavailableError(f"view of {self.name} is closed")
            checked_at = time.monotonic()
            seen = self._seen
            if self._handle is not None and seen is not None and self._store_files.unchanged(seen):
                self._current_at = checked_at
                return
            files = self._store_files.scan()
            if files.identity is None:
                if not wait:
                    raise ReadWouldWaitError(f"the view of {self.name} must close")
                self._swap(None, None)
                raise CopyUnavailableError(f"no copy of store {self.name} at {self.path}")
            if self._handle is not None and files == seen:
                self._seen = files  # the same files: a newer stamp of the directory
                self._current_at = checked_at
                return
            if not wait:
                raise ReadWouldWaitError(f"the view of {self.name} must follow the primary")
            if self._handle is None or seen is None or files.manifest != seen.manifest:
                handle, state, settled = self._open_settled()
                self._swap((handle, state), settled)
                self._current_at = checked_at
                return
            with self._lock.exclusive():
                try:
                    self._mirror.sync()
                    self._handle.db.try_catch_up_with_primary()
                    self.catch_ups += 1
                    caught_up = self._store_files.scan().manifest == files.manifest
                except Exception as exc:  # rocksdict raises plain Exception
                    log.info("query view %s: catch-up failed (%s); reopening", self.path, exc)
                    caught_up = False
                if caught_up:
                    self._state, self._window_store = self._load_state(self._handle)
                    self._seen = files
                    self._current_at = checked_at
                    return
                # The MANIFEST moved during the catch-up: the view may hold the mix the
                # class docstring describes, so nobody reads it until a fresh one is in.
                old, self._handle, self._seen = self._handle, None, None
                self._state, self._window_store = CopyState(None, None), None
                old.close()
                handle, state, settled = self._open_settled()
                self._install(handle, state)
                self._seen = settled
                self._current_at = checked_at
        finally:
            self._refresh_mutex.release()

    def _open_settled(self) -> tuple[_Handle, tuple[CopyState, WindowBytesStore | None], Files]:
        """A new secondary and its state, opened while the MANIFEST did not move."""
        for attempt in range(1, self.OPEN_ATTEMPTS + 1):
            before = self._store_files.scan()
            handle = self._open()
            try:
                state = self._load_state(handle)
            except BaseException:
                handle.close()
                raise
            after = self._store_files.scan()
            if after.manifest == before.manifest or attempt == self.OPEN_ATTEMPTS:
                # On the last attempt ``before`` is kept: the next refresh sees the moved
                # MANIFEST and opens again.
                return handle, state, before
            handle.close()
        raise AssertionError("unreachable")

    def _open(self) -> _Handle:
        secondary = self.scratch_dir / f"{self.name}-{next(self._serial)}"
        secondary.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, self.OPEN_ATTEMPTS + 1):
            try:
                # A file the primary created after the sync is missing from the mirror:
                # sync again and retry.
                self._mirror.sync()
                db = rocksdict.Rdict(
                    str(self._mirror.path),
                    _options(),
                    column_families={META_CF: _options()},
                    access_type=rocksdict.AccessType.secondary(str(secondary)),
                )
                break
            except Exception as exc:  # a directory being created or removed right now
                if attempt < self.OPEN_ATTEMPTS:
                    continue
                shutil.rmtree(secondary, ignore_errors=True)
                raise CopyUnavailableError(
                    f"cannot open the copy of store {self.name} at {self.path}: {exc}"
                ) from exc
        self.reopens += 1
        return _Handle(db, secondary)

    def _swap(
        self,
        opened: tuple[_Handle, tuple[CopyState, WindowBytesStore | None]] | None,
        files: Files | None,
    ) -> None:
        """Put a freshly opened ``(handle, state)`` in (None: no copy), closing the old."""
        with self._lock.exclusive():
            old = self._handle
            self._handle, self._seen = None, None
            self._state, self._window_store = CopyState(None, None), None
            if opened is not None:
                self._install(*opened)
                self._seen = files
        if old is not None:
            old.close()

    def _install(self, handle: _Handle, state: tuple[CopyState, WindowBytesStore | None]) -> None:
        self._handle = handle
        self._state, self._window_store = state

    def _load_state(self, handle: _Handle) -> tuple[CopyState, WindowBytesStore | None]:
        try:
            meta = decode_metadata(handle.meta.get)
        except ValueError as exc:
            raise CopyUnavailableError(
                f"store {self.name} at {self.path} has unreadable metadata: {exc}"
            ) from exc
        state = CopyState.of(meta)
        window = None
        if self.window is not None:
            retention_ms, size_ms = self.window
            # Reads the observed stream time once: fetches then clip to retention as the
            # task's own store does.
            window = WindowBytesStore(
                self.name,
                SecondaryKeyValueReader(handle.db),
                retention_ms=retention_ms,
                window_size_ms=size_ms,
            )
        return state, window

    # -- reading ---------------------------------------------------------------------------

    @contextmanager
    def reading(self, wait: bool = True) -> Iterator[CopyReader]:
        """A consistent read of the view (no catch-up runs until the block ends);
        ``wait=False``: raises :class:`ReadWouldWaitError` while a catch-up holds it."""
        with self._lock.shared(wait):
            handle = self._handle
            if handle is None:
                raise CopyUnavailableError(f"no readable copy of store {self.name} here")
            yield CopyReader(SecondaryKeyValueReader(handle.db), self._state, self._window_store)

    @property
    def state(self) -> CopyState:
        return self._state

    def close(self) -> None:
        with self._refresh_mutex:
            self._closed = True
            self._swap(None, None)
            self._mirror.remove()


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
