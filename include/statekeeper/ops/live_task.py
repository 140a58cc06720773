"""Open a live task for reading: what every operator read goes through.

An operator's read never writes (drills, ``stores list|inspect``, the State stores page,
audits): a live task directory ``<state_dir>/<app>/<task>/`` belongs to the app, which may be
running, stopped or about to start. So this module

- never runs the changelog restorer (no tail is applied, nothing is reverted, rolled forward,
  wiped or rebuilt): a store is read exactly as its last commit left it, with that commit's
  metadata (batch id, changelog marker offset, source offsets);
- takes no task lock, leaves no release request and never asks a holder to let go: whether
  the app holds a task is read from the kernel's lock table (``/proc/locks``), not by trying
  the lock (:func:`lock_holder`);
- opens no RocksDB handle on a live store directory. Opening any rocksdict handle, even a
  read-only one, rewrites ``rocksdict-config.json`` in the database directory (in place,
  without truncating it), and RocksDB may write its info log there. Each store is instead
  opened read-only on a private *shadow* in a temporary directory: hard links to its
  immutable table files (``*.sst``, ``*.blob``; copies where a link is impossible) and
  copies of everything else RocksDB reads (``CURRENT``, ``MANIFEST-*``, ``OPTIONS-*``,
  ``IDENTITY``, the WAL ``*.log``). Linking changes no byte, size or modification time of a
  live file, and the shadow is removed when the store is closed. Shadows live under the
  temporary directory (``TMPDIR``); where that is another file system than the state, the
  table files are copied instead of linked.

A running app may flush or compact while a shadow is built; the shadow is rebuilt when the
store's ``CURRENT``, MANIFEST or WAL set moved meanwhile (or a file vanished), so what is read
is one state RocksDB had on disk. :func:`verify_live_commit` checks a live store's committed
marker against its changelog without repairing anything.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rocksdict

from statekeeper.changelog.fencing import CommitSplitter, is_marker_key
from statekeeper.changelog.records import CommitMarker, changelog_topic
from statekeeper.changelog.restorer import ChangelogRestorer
from statekeeper.errors import ChangelogCorruptError, StoreCorruptError
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.model import OffsetRange
from statekeeper.kafka.offsets import log_end_offsets, log_start_offsets
from statekeeper.kafka.range_reader import iter_partition_runs
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.directory import TaskDirectory, TaskLock
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import StoreSpec
from statekeeper.stores.read_only_view import ReadOnlyStoreView
from statekeeper.stores.rocksdb import META_CF, decode_metadata, scan_range
from statekeeper.stores.window_bytes import WindowBytesStore, changelog_window_key

#: ``{changelog key: value}``: a key-value store's key, or ``key | window start`` for a
#: window store (the same shape as :mod:`statekeeper.ops.drill.contents`).
Contents = dict[bytes, bytes]

#: Immutable once written: linked into a shadow. Everything else is copied.
_IMMUTABLE_SUFFIXES = (".sst", ".blob")
#: Never taken into a shadow: RocksDB's lock file and info logs are the writer's own.
_SKIPPED = ("LOCK", "LOG")
#: Shadow rebuilds before giving up on a store whose files keep moving.
SHADOW_ATTEMPTS = 5


class LiveStoreUnreadableError(StoreCorruptError):
    """A live store could not be read (unreadable files, metadata, or files that kept moving
    while the shadow was built). Nothing was repaired."""


# -- the task lock, observed -----------------------------------------------------------------


def lock_holder(directory: TaskDirectory) -> str | None:
    """Who holds the task lock of ``directory`` right now (the PID its holder wrote into
    ``.lock``), or None when nobody does.

    Read from ``/proc/locks``: trying the lock, even without blocking, would hold it for a
    moment, and an app opening the task in that moment would find it taken. Where the lock
    table cannot be read (not Linux), falls back to a non-blocking try
    (:meth:`TaskLock.held_elsewhere`), which never waits and never leaves a release request.
    """
    path = directory.lock_file
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    try:
        table = Path("/proc/locks").read_text()
    except OSError:
        return _lock_file_pid(path) if TaskLock(directory, 0).held_elsewhere() else None
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    same_inode = False
    for line in table.splitlines():
        fields = line.split()
        # "<n>: FLOCK ADVISORY WRITE <pid> <maj:min:inode> <start> <end>"; a blocked waiter
        # has a "->" after the number and holds nothing.
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        dev, _, inode = fields[5].rpartition(":")
        if inode != str(st.st_ino):
            continue
        if dev == device:
            return _lock_file_pid(path)
        same_inode = True
    if same_inode:
        # Some file systems (btrfs subvolumes, overlays) show another device in the lock
        # table than stat() does: only then is the lock tried, without waiting.
        return _lock_file_pid(path) if TaskLock(directory, 0).held_elsewhere() else None
    return None


def _lock_file_pid(path: Path) -> str:
    """The PID a holder wrote into ``.lock`` (``unknown`` when it cannot be read)."""
    try:
        return path.read_text().strip() or "unknown"
    except OSError:
        return "unknown"


# -- one store, read-only, through a shadow --------------------------------------------------


def _listing(path: Path) -> dict[str, os.stat_result]:
    found = {}
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                found[entry.name] = entry.stat(follow_symlinks=False)
    return found


def _moving_files(listing: dict[str, os.stat_result], current: bytes) -> tuple[Any, ...]:
    """What a flush or compaction of the writer changes: CURRENT, the MANIFEST and WAL set."""
    return (
        current,
        tuple(sorted(n for n in listing if n.startswith("MANIFEST-") or n.endswith(".log"))),
    )


def _copy_order(name: str) -> tuple[int, str]:
    if name.startswith("MANIFEST-"):
        return 0, name
    if name.endswith(_IMMUTABLE_SUFFIXES):
        return 1, name
    return (2 if name.endswith(".log") else 3), name


def _build_shadow(live: Path, shadow: Path) -> bool:
    """Fill ``shadow`` from the live store directory ``live`` (reading it only); whether the
    copy is one state of the store (False: files moved meanwhile, build again)."""
    current = (live / "CURRENT").read_bytes()
    before = _listing(live)
    # The MANIFEST first, then the files it names, then the WAL: a flush or compaction in
    # between then shows as a file gone (or a moved MANIFEST/WAL set), and the shadow is
    # built again.
    for name in sorted(before, key=_copy_order):
        if name in _SKIPPED or name.startswith("LOG."):
            continue
        source, target = live / name, shadow / name
        try:
            if name.endswith(_IMMUTABLE_SUFFIXES):
                try:
                    os.link(source, target)
                except OSError:  # another file system, or links not allowed: copy it
                    shutil.copyfile(source, target)
            else:
                shutil.copyfile(source, target)
        except FileNotFoundError:
            return False  # removed by a compaction or a WAL switch while we copied
    after = _listing(live)
    return _moving_files(after, (live / "CURRENT").read_bytes()) == _moving_files(
        before, current
    ) and all(name in after for name in before if name.endswith(_IMMUTABLE_SUFFIXES))


def _open_shadow(shadow: Path) -> tuple[Any, Any]:
    """A read-only rocksdict handle on a shadow, and its metadata column family (or None)."""
    opts = rocksdict.Options(raw_mode=True)
    opts.set_db_log_dir(str(shadow.parent / "log"))  # no info log beside the data either
    families = rocksdict.Rdict.list_cf(str(shadow), rocksdict.Options(raw_mode=True))
    column_families = {META_CF: rocksdict.Options(raw_mode=True)} if META_CF in families else None
    db = rocksdict.Rdict(
        str(shadow),
        opts,
        column_families=column_families,
        access_type=rocksdict.AccessType.read_only(False),
    )
    meta = db.get_column_family(META_CF) if column_families else None
    return db, meta


class ReadOnlyStore(ReadOnlyStoreView):
    """One live RocksDB store's committed state, read through a private shadow (module
    docstring).

    Offers what :class:`~statekeeper.stores.window_bytes.WindowBytesStore` and the operator
    tools read (``get``, ``range``, ``items``, ``approximate_num_entries``,
    :meth:`read_metadata`); it has no write method. Close it (or use it as a context
    manager) to drop the shadow.
    """

    persistent = True

    def __init__(self, path: Path, name: str | None = None) -> None:
        self.path = Path(path)
        self.name = name or self.path.name
        if not (self.path / "CURRENT").is_file():
            raise LiveStoreUnreadableError(
                f"no RocksDB store at {self.path} (no CURRENT file): nothing to read"
            )
        self._scratch = Path(tempfile.mkdtemp(prefix="statekeeper-live-read-"))
        self._db: Any = None
        self._meta: Any = None
        try:
            self._open()
        except BaseException:
            shutil.rmtree(self._scratch, ignore_errors=True)
            raise

    def _open(self) -> None:
        error: Exception | None = None
        for attempt in range(SHADOW_ATTEMPTS):
            shadow = self._scratch / f"db-{attempt}"
            shadow.mkdir()
            try:
                settled = _build_shadow(self.path, shadow)
                if settled:
                    self._db, self._meta = _open_shadow(shadow)
                    return
            except FileNotFoundError as exc:  # CURRENT or the directory went away
                error = exc
            except Exception as exc:  # rocksdict raises plain Exception for I/O and corruption
                error = exc
            shutil.rmtree(shadow, ignore_errors=True)
        raise LiveStoreUnreadableError(
            f"cannot read the store at {self.path} read-only"
            + (f": {error}" if error else f": its files kept moving ({SHADOW_ATTEMPTS} tries)")
        ) from error

    # -- reads -----------------------------------------------------------------------------

    def get(self, key: bytes) -> bytes | None:
        return self._db.get(key)

    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key <= end`` (None: unbounded), in key order."""
        if reverse:
            raise NotImplementedError("live reads scan forwards only")
        return scan_range(self._db, start, end)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every raw entry of the data column family, in key order."""
        return self.range(None, None)

    def approximate_num_entries(self) -> int:
        """RocksDB's ``estimate-num-keys`` (counts overwrites not yet compacted away)."""
        return int(self._db.property_int_value("rocksdb.estimate-num-keys") or 0)

    def read_metadata(self) -> StoreMetadata:
        """The metadata of the store's last commit (all None/empty: never committed)."""
        if self._meta is None:
            return StoreMetadata()
        try:
            return decode_metadata(self._meta.get)
        except ValueError as exc:
            raise LiveStoreUnreadableError(
                f"store {self.name!r} at {self.path} has unreadable metadata: {exc}"
            ) from exc

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Close the handle and remove the shadow."""
        meta, db, self._meta, self._db = self._meta, self._db, None, None
        try:
            if meta is not None:
                meta.close()
            if db is not None:
                db.close()
        finally:
            del meta, db
            shutil.rmtree(self._scratch, ignore_errors=True)

    def __enter__(self) -> ReadOnlyStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def has_local_copy(spec: StoreSpec, path: Path) -> bool:
    """Whether ``path`` holds files of ``spec``'s store: RocksDB's CURRENT, or for a custom
    engine any file at all (its supplier's view says whether they are readable)."""
    if spec.supplier is None:
        return (path / "CURRENT").is_file()
    return path.is_dir() and any(p.is_file() for p in path.iterdir())


def open_store_view(path: Path, spec: StoreSpec | None = None) -> ReadOnlyStoreView:
    """The committed state of the live store at ``path``, read without writing, restoring or
    locking anything there: a RocksDB store through a private shadow (:class:`ReadOnlyStore`),
    a custom store (``spec.supplier``) through its supplier's ``open_read_only``. Raises
    :class:`LiveStoreUnreadableError` when it cannot be read, or the supplier has no
    read-only view (the message names the method)."""
    if spec is None or spec.supplier is None:
        return ReadOnlyStore(path, spec.name if spec is not None else None)
    if not Path(path).is_dir():
        raise LiveStoreUnreadableError(f"no store {spec.name!r} at {path}: nothing to read")
    try:
        return spec.supplier.open_read_only(spec.name, Path(path))
    except NotImplementedError as exc:
        raise LiveStoreUnreadableError(f"store {spec.name!r}: {exc}") from exc
    except StoreCorruptError as exc:
        raise LiveStoreUnreadableError(f"cannot read store {spec.name!r} at {path}: {exc}") from exc


@contextmanager
def read_only_store(
    path: Path, name: str | None = None, spec: StoreSpec | None = None
) -> Iterator[ReadOnlyStoreView]:
    """``with read_only_store(path) as store:`` the live store at ``path``, read-only
    (:func:`open_store_view`; ``spec``: a custom store's, to reach its supplier)."""
    store = open_store_view(path, spec) if spec is not None else ReadOnlyStore(path, name)
    try:
        yield store
    finally:
        store.close()


# -- a task's stores -------------------------------------------------------------------------


@dataclass
class LiveStore:
    """One live store as its last commit left it."""

    spec: StoreSpec
    path: Path
    metadata: StoreMetadata
    #: Every entry (changelog keys; windows past retention at the store's stream time left
    #: out, as the store itself hides them). None when not asked for.
    contents: Contents | None
    approx_entries: int
    observed_stream_time: int | None = None  # window stores


@dataclass
class LiveTask:
    """What :func:`read_live_task` found of one task on this machine."""

    task_id: str
    directory: TaskDirectory
    #: The PID holding the task lock while it was read (None: the app does not hold it).
    holder: str | None
    stores: dict[str, LiveStore] = field(default_factory=dict)
    #: Persistent stores with no local files (never opened here, or removed).
    missing: list[str] = field(default_factory=list)
    #: In-memory and LRU stores: they live only in the running app's process.
    in_memory: list[str] = field(default_factory=list)
    #: Custom stores whose supplier has no read-only view: ``{store: why}``.
    unreadable: dict[str, str] = field(default_factory=dict)

    @property
    def exists(self) -> bool:
        return self.directory.path.is_dir()


def read_live_store(spec: StoreSpec, path: Path, *, contents: bool = True) -> LiveStore:
    """Read one persistent live store (metadata, and its entries when ``contents``)."""
    with read_only_store(path, spec.name, spec) as store:
        observed = None
        entries: Contents | None = None
        if spec.kind == "window":
            assert spec.retention_ms is not None and spec.window_size_ms is not None
            window = WindowBytesStore(
                spec.name, store, retention_ms=spec.retention_ms, window_size_ms=spec.window_size_ms
            )
            observed = window.observed_stream_time
            approx = window.approximate_num_entries()
            if contents:
                entries = {changelog_window_key(k, start): v for k, start, v in window.all()}
        else:
            approx = store.approximate_num_entries()
            if contents:
                entries = dict(store.items())
        return LiveStore(spec, Path(path), store.read_metadata(), entries, approx, observed)


def read_live_task(
    settings: StatekeeperSettings,
    task_id: str,
    specs: list[StoreSpec],
    *,
    contents: bool = True,
) -> LiveTask:
    """Every persistent store of task ``task_id`` under ``settings.state_dir`` as its last
    commit left it, read without the restorer, without the task lock and without writing
    (module docstring). Works whether or not the app runs; :attr:`LiveTask.holder` says."""
    directory = TaskDirectory(settings.state_dir, settings.application_id, task_id)
    found = LiveTask(task_id, directory, lock_holder(directory))
    for spec in specs:
        path = directory.store_path(spec.name)
        if not spec.persistent:
            found.in_memory.append(spec.name)
        elif not has_local_copy(spec, path):
            found.missing.append(spec.name)
        elif spec.supplier is not None and not spec.supplier.has_read_only_view:
            found.unreadable[spec.name] = (
                f"{type(spec.supplier).__name__} has no open_read_only(): its live copy cannot "
                "be read without opening it (docs/custom-stores.md)"
            )
        else:
            found.stores[spec.name] = read_live_store(spec, path, contents=contents)
    return found


# -- a live commit against its changelog ---------------------------------------------------


def verify_live_commit(
    settings: StatekeeperSettings, store: str, partition: int, meta: StoreMetadata
) -> str | None:
    """Why the live store ``store``'s last commit (``meta``) is inconsistent with its
    changelog partition, or None when it is consistent. Reads the changelog only.

    Inconsistent: the checkpointed marker offset lies past the log end or below the log start,
    the record there is missing or is not a commit marker of that batch, or the commit was a
    fenced writer's (a newer epoch had begun before it; :mod:`statekeeper.changelog.fencing`).
    A store with no commit has nothing to check (None)."""
    offset = meta.changelog_offset
    if offset is None:
        return None
    topic = changelog_topic(settings.application_id, store)
    tp = (topic, partition)
    where = f"{topic}[{partition}]"
    conf = consumer_config(settings.bootstrap_servers)
    timeout = settings.broker_timeout_s
    low = log_start_offsets(conf, [tp], timeout)[tp]
    end = log_end_offsets(conf, [tp], timeout)[tp]
    if offset >= end:
        return (
            f"checkpointed marker offset {offset} is past the end of changelog {where} "
            f"(log end offset {end})"
        )
    if offset < low:
        return (
            f"checkpointed marker offset {offset} is below the start of changelog {where} "
            f"(log start offset {low}): the marker is gone"
        )
    first: list[Any] = []

    def ignore(*_: Any) -> None:
        return None

    splitter = CommitSplitter(where, ignore, fence=meta.epoch)
    try:
        for _, msgs in iter_partition_runs(
            conf, [OffsetRange(topic, partition, offset, end)], timeout
        ):
            keys = [m.key() or b"" for m in msgs]
            if not first:
                first.append(msgs[0])
                problem = _marker_problem(msgs[0], keys[0], offset, meta, where)
                if problem is not None:
                    return problem
                msgs, keys = msgs[1:], keys[1:]
            splitter.take(msgs, keys)
    except ChangelogCorruptError as exc:
        return f"changelog {where} after offset {offset} is unreadable: {exc}"
    if not first:
        return f"changelog {where} has no record at checkpointed marker offset {offset}"
    if late := splitter.unannounced_epochs():
        return (
            f"the commit at {where} offset {offset} (epoch {meta.epoch}) was written after "
            f"epoch {late[0]} had begun: a fenced writer's commit"
        )
    verified = meta.verified_offset
    if verified is not None and verified < offset:
        restorer = ChangelogRestorer(conf, timeout_s=timeout)
        seen = restorer.newest_epoch(topic, partition, max(verified, low), meta.epoch, offset)
        if seen.fence > meta.epoch:
            return (
                f"the commit at {where} offset {offset} (epoch {meta.epoch}) was written after "
                f"epoch {seen.fence} had begun: a fenced writer's commit"
            )
    return None


def _marker_problem(
    msg: Any, key: bytes | None, offset: int, meta: StoreMetadata, where: str
) -> str | None:
    if msg.offset() != offset:
        return (
            f"changelog {where} has no record at checkpointed marker offset {offset} (the next "
            f"one is at {msg.offset()}: deleted or compacted away)"
        )
    if key is None or not is_marker_key(key):
        return f"changelog {where} offset {offset} is not a commit marker (key {key!r})"
    try:
        marker = CommitMarker.decode(msg.value(), where=f"{where} offset {offset}")
    except ChangelogCorruptError as exc:
        return str(exc)
    if meta.batch_id is not None and marker.batch_id != meta.batch_id:
        return (
            f"changelog {where} offset {offset} is the marker of batch {marker.batch_id}, but "
            f"the live store says batch {meta.batch_id}"
        )
    return None


__all__ = [
    "Contents",
    "LiveStore",
    "LiveStoreUnreadableError",
    "LiveTask",
    "ReadOnlyStore",
    "has_local_copy",
    "lock_holder",
    "open_store_view",
    "read_live_store",
    "read_live_task",
    "read_only_store",
    "verify_live_commit",
]
