"""SQLite (the standard library's ``sqlite3``) as a statekeeper store engine.

The worked example of docs/custom-stores.md: a user's own key-value store behind the same
layers, restores, snapshots and queries as the built-in ones.

- One database file per task store, ``store.sqlite3``, in rollback-journal mode (``DELETE``):
  a commit is one SQLite transaction holding the batch's writes and the store metadata
  (changelog offset, batch id, source offsets), so data and offsets never disagree on disk,
  whatever kill -9 interrupts.
- Writes are staged in memory until :meth:`SQLiteKeyValueStore.commit`; reads see them.
- A read-only view copies the file (and a journal, if one is there) into a scratch
  directory without taking a lock, checks that neither SQLite's file change counter nor the
  journal moved meanwhile, and opens the copy: SQLite's own crash recovery then turns the
  copy into the last committed state. Copying a db mid-commit is safe because every page a
  transaction overwrites is in its journal first, and the journal is copied after the db.

This file imports only statekeeper and the standard library: the topology ships it to the
Spark executors by value.
"""

from __future__ import annotations

import contextlib
import copy
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from statekeeper.errors import StoreCorruptError
from statekeeper.stores.base import (
    ClosableMixin,
    KeyValueBytesStore,
    StoreMetadata,
    Value,
    merge_overlay,
)
from statekeeper.stores.read_only_view import ReadOnlyStoreView
from statekeeper.stores.supplier import StoreSupplier

DB_FILE = "store.sqlite3"
JOURNAL_FILE = DB_FILE + "-journal"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)",
)
_METADATA_KEY = "metadata"
#: Bytes 24-27 of a SQLite file: its change counter, bumped by every committed transaction
#: in rollback-journal mode.
_COUNTER = slice(24, 28)
#: Copies retried while commits keep landing under them.
VIEW_ATTEMPTS = 20


def _range_sql(start: bytes | None, end: bytes | None, reverse: bool) -> tuple[str, list]:
    where, args = [], []
    if start is not None:
        where.append("k >= ?")
        args.append(start)
    if end is not None:
        where.append("k <= ?")
        args.append(end)
    sql = "SELECT k, v FROM kv" + (" WHERE " + " AND ".join(where) if where else "")
    return sql + (" ORDER BY k DESC" if reverse else " ORDER BY k"), args


def _decode_metadata(row: tuple[str] | None, where: Path) -> StoreMetadata:
    if row is None:
        return StoreMetadata()
    try:
        return StoreMetadata.from_json(row[0])
    except ValueError as exc:
        raise StoreCorruptError(f"SQLite store at {where}: unreadable metadata: {exc}") from exc


class SQLiteKeyValueStore(ClosableMixin, KeyValueBytesStore):
    """One task's store in one SQLite file; writes staged until :meth:`commit`."""

    persistent = True

    def __init__(self, name: str, directory: Path, *, synchronous: str = "FULL") -> None:
        self.name = name
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._pending: dict[bytes, Value] = {}
        self._count: int | None = None
        try:
            self._db = sqlite3.connect(
                self.directory / DB_FILE, isolation_level=None, check_same_thread=False
            )
            self._db.execute("PRAGMA journal_mode=DELETE")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            for statement in _SCHEMA:
                self._db.execute(statement)
            self.read_metadata()
        except sqlite3.DatabaseError as exc:
            raise StoreCorruptError(f"SQLite store {name!r} at {self.directory}: {exc}") from exc

    # -- reads -----------------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        self._check_open()
        if key in self._pending:
            return self._pending[key]
        row = self._db.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        return row[0] if row else None

    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        self._check_open()
        sql, args = _range_sql(start, end, reverse)
        base = iter(self._db.execute(sql, args).fetchall())
        overlay = sorted(
            (item for item in self._pending.items() if _within(item[0], start, end)),
            reverse=reverse,
        )
        return merge_overlay(base, overlay, reverse=reverse)

    def approximate_num_entries(self) -> int:
        self._check_open()
        if self._count is None:
            self._count = self._db.execute("SELECT count(*) FROM kv").fetchone()[0]
        return self._count + sum(1 for v in self._pending.values() if v is not None)

    def read_metadata(self) -> StoreMetadata:
        self._check_open()
        row = self._db.execute("SELECT v FROM meta WHERE k = ?", (_METADATA_KEY,)).fetchone()
        return _decode_metadata(row, self.directory)

    # -- writes ----------------------------------------------------------------------------

    def put(self, key: bytes, value: Value) -> None:
        self._check_open()
        self._pending[key] = value

    def put_all(self, items: Iterable[tuple[bytes, Value]]) -> None:
        self._check_open()
        self._pending.update(items)

    def discard(self) -> None:
        self._pending.clear()

    def commit(self, metadata: StoreMetadata) -> None:
        self._check_open()
        self._apply(self._pending, metadata)
        self._pending = {}

    def restore_batch(
        self, records: list[tuple[bytes, Value]], metadata: StoreMetadata | None
    ) -> None:
        self._check_open()
        self._apply(dict(records), metadata)  # later records of a key win

    def _apply(self, writes: dict[bytes, Value], metadata: StoreMetadata | None) -> None:
        """One transaction: the writes and the metadata, both or neither."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany(
                "INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)",
                ((k, v) for k, v in writes.items() if v is not None),
            )
            db.executemany(
                "DELETE FROM kv WHERE k = ?", ((k,) for k, v in writes.items() if v is None)
            )
            if metadata is not None:
                db.execute(
                    "INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)",
                    (_METADATA_KEY, metadata.to_json()),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._count = None

    def wipe(self) -> None:
        self._check_open()
        self._pending.clear()
        self._db.execute("BEGIN IMMEDIATE")
        self._db.execute("DELETE FROM kv")
        self._db.execute("DELETE FROM meta")
        self._db.execute("COMMIT")
        self._count = None

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._db.close()


def _within(key: bytes, start: bytes | None, end: bytes | None) -> bool:
    return (start is None or key >= start) and (end is None or key <= end)


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    """Which file is at ``path`` and how far it was written (None: none)."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _change_counter(db_file: Path) -> bytes:
    with open(db_file, "rb") as fh:
        return fh.read(100)[_COUNTER]


class SQLiteReadOnlyView(ReadOnlyStoreView):
    """The last commit of a live SQLite store, read from a private copy (module docstring)."""

    def __init__(self, name: str, directory: Path) -> None:
        self.name = name
        self.directory = Path(directory)
        live = self.directory / DB_FILE
        if not live.is_file():
            raise StoreCorruptError(f"no SQLite store at {self.directory}: nothing to read")
        self._scratch = Path(tempfile.mkdtemp(prefix="statekeeper-sqlite-view-"))
        try:
            self._counter = self._copy(live)
            copied = self._scratch / DB_FILE
            # Opened read-write: a journal copied beside the db is rolled back here, in the
            # copy, exactly as the owner's next open would roll it back in the live store.
            self._db = sqlite3.connect(copied, isolation_level=None, check_same_thread=False)
            row = self._db.execute("SELECT v FROM meta WHERE k = ?", (_METADATA_KEY,)).fetchone()
            self._metadata = _decode_metadata(row, self.directory)
        except sqlite3.DatabaseError as exc:
            shutil.rmtree(self._scratch, ignore_errors=True)
            raise StoreCorruptError(f"SQLite store at {self.directory}: {exc}") from exc
        except BaseException:
            shutil.rmtree(self._scratch, ignore_errors=True)
            raise

    def _copy(self, live: Path) -> bytes:
        """Copy the db, then its journal if any; retried until neither the change counter nor
        the journal moved meanwhile. Both are needed: a commit that has written page 1 (the
        counter) but not yet its other pages shows the same counter before and after the
        copy; its journal, there before the copy and gone after, tells."""
        journal = self.directory / JOURNAL_FILE
        for attempt in range(VIEW_ATTEMPTS):
            (self._scratch / JOURNAL_FILE).unlink(missing_ok=True)
            before = (_change_counter(live), _identity(journal))
            shutil.copyfile(live, self._scratch / DB_FILE)
            with contextlib.suppress(FileNotFoundError):
                shutil.copyfile(journal, self._scratch / JOURNAL_FILE)
            if (_change_counter(live), _identity(journal)) == before:
                return before[0]
            time.sleep(0.002 * (attempt + 1))
        raise StoreCorruptError(
            f"SQLite store at {self.directory}: commits kept landing during {VIEW_ATTEMPTS} copies"
        )

    def get(self, key: bytes) -> bytes | None:
        row = self._db.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        return row[0] if row else None

    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        sql, args = _range_sql(start, end, reverse)
        return iter(self._db.execute(sql, args).fetchall())

    def approximate_num_entries(self) -> int:
        return int(self._db.execute("SELECT count(*) FROM kv").fetchone()[0])

    def read_metadata(self) -> StoreMetadata:
        return copy.deepcopy(self._metadata)

    def is_current(self) -> bool:
        try:
            return _change_counter(self.directory / DB_FILE) == self._counter
        except OSError:
            return False

    def close(self) -> None:
        self._db.close()
        shutil.rmtree(self._scratch, ignore_errors=True)


@dataclass(frozen=True)
class SQLiteStoreSupplier(StoreSupplier):
    """``Stores.custom("counts", SQLiteStoreSupplier())``: each task's store in SQLite.

    ``synchronous``: SQLite's ``PRAGMA synchronous`` (FULL: a commit survives power loss;
    NORMAL/OFF survive a process crash only)."""

    synchronous: str = "FULL"
    engine = "sqlite"
    persistent = True

    def __post_init__(self) -> None:
        if self.synchronous.upper() not in ("OFF", "NORMAL", "FULL", "EXTRA"):
            raise ValueError(
                f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {self.synchronous!r}"
            )

    def get(self, name: str, directory: Path) -> SQLiteKeyValueStore:
        return SQLiteKeyValueStore(name, directory, synchronous=self.synchronous.upper())

    def open_read_only(self, name: str, directory: Path) -> SQLiteReadOnlyView:
        return SQLiteReadOnlyView(name, directory)
