"""Stage one store's committed contents in a local directory, cheaply.

RocksDB stores: a rocksdict ``Checkpoint`` (hard links to the immutable SST files plus a
small MANIFEST/OPTIONS/CURRENT; RocksDB flushes the memtable first, so the checkpoint holds
everything committed). In-memory and LRU stores: their entries are dumped to one
``data.kvdump`` file in a simple length-prefixed format::

    b"SKKVDUMP1\\n" then per entry: uint32 big-endian key length, key,
                                  uint32 big-endian value length, value

Either way the store must be at a commit boundary (no staged writes), which is where
after-commit hooks and a freshly opened task are.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rocksdict

from statekeeper.snapshots.manifest import SnapshotError, SnapshotFile
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.rocksdb import META_CF, RocksDBKeyValueStore

KV_DUMP_MAGIC = b"SKKVDUMP1\n"
KV_DUMP_FILE = "data.kvdump"
KV_DUMP_METADATA_FILE = "metadata.json"
LAYOUT_ROCKSDB = "rocksdb-checkpoint"
LAYOUT_KV_DUMP = "kv-dump"
_LEN = struct.Struct(">I")
_HASH_CHUNK = 1 << 20


@dataclass
class StagedStore:
    """A store's committed contents in a local directory, ready to upload."""

    directory: Path
    layout: str
    files: list[SnapshotFile]
    key_count: int
    metadata: StoreMetadata
    pause_s: float  # how long the store itself was busy (checkpoint or dump)


def innermost_store(store: Any) -> Any:
    """The bytes store at the bottom of a layer stack (typed → caching → logging → inner)."""
    seen = 0
    while seen < 16:
        nxt = getattr(store, "wrapped", None) or getattr(store, "inner", None)
        if nxt is None:
            return store
        store, seen = nxt, seen + 1
    raise SnapshotError(f"cannot find the inner store below {store!r}")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _describe(directory: Path) -> list[SnapshotFile]:
    return [
        SnapshotFile(path.name, sha256_file(path), path.stat().st_size)
        for path in sorted(directory.iterdir())
        if path.is_file()
    ]


def stage_store(store: Any, directory: Path, *, describe: bool = True) -> StagedStore:
    """Checkpoint or dump ``store`` (any layer of a store stack) into ``directory`` (must
    not exist yet). ``describe=False`` leaves hashing the files and counting a checkpoint's
    keys to :func:`describe_staged` (a background uploader), so the caller pauses only for
    the checkpoint: ``files`` is then empty and ``key_count`` -1 for a checkpoint."""
    inner = innermost_store(store)
    if getattr(inner, "_pending", None) or getattr(inner, "_pending_range_deletes", None):
        raise SnapshotError(
            f"store {inner.name!r} has uncommitted writes: snapshots are taken at a commit"
        )
    directory.parent.mkdir(parents=True, exist_ok=True)
    metadata = inner.read_metadata()
    started = time.perf_counter()
    if isinstance(inner, RocksDBKeyValueStore):
        rocksdict.Checkpoint(inner._db).create_checkpoint(str(directory))
        pause = time.perf_counter() - started
        layout = LAYOUT_ROCKSDB
        key_count = count_checkpoint_keys(directory) if describe else -1
    else:
        directory.mkdir()
        key_count = write_kv_dump(directory / KV_DUMP_FILE, inner.range(None, None))
        # The whole commit metadata (epoch and verified offset too, which the manifest does
        # not carry): an install into a custom store's supplier writes it with the data.
        (directory / KV_DUMP_METADATA_FILE).write_text(metadata.to_json())
        pause = time.perf_counter() - started
        layout = LAYOUT_KV_DUMP
    files = _describe(directory) if describe else []
    return StagedStore(directory, layout, files, key_count, metadata, pause)


def describe_staged(staged: StagedStore) -> StagedStore:
    """``staged`` with its files hashed and its keys counted (a no-op when they are): the
    staged copy is immutable (hard links, a dump), so this runs off the processing path."""
    if staged.files and staged.key_count >= 0:
        return staged
    key_count = staged.key_count
    if key_count < 0:
        key_count = count_checkpoint_keys(staged.directory)
    return dataclasses.replace(staged, files=_describe(staged.directory), key_count=key_count)


def count_checkpoint_keys(directory: Path) -> int:
    """Exact key count of a RocksDB checkpoint, read-only (the live store is untouched)."""
    opts = rocksdict.Options(raw_mode=True)
    db = rocksdict.Rdict(
        str(directory),
        opts,
        column_families={META_CF: rocksdict.Options(raw_mode=True)},
        access_type=rocksdict.AccessType.read_only(),
    )
    try:
        return sum(1 for _ in db.keys())  # noqa: SIM118 - iter(Rdict) is not keys
    finally:
        db.close()


def write_kv_dump(path: Path, entries: Iterable[tuple[bytes, bytes]]) -> int:
    """Write ``entries`` in the kv-dump format; returns how many."""
    count = 0
    with open(path, "wb") as fh:
        fh.write(KV_DUMP_MAGIC)
        for key, value in entries:
            fh.write(_LEN.pack(len(key)) + key + _LEN.pack(len(value)) + value)
            count += 1
    return count


def read_kv_dump(path: Path) -> Iterator[tuple[bytes, bytes]]:
    """The entries of a kv-dump file, in file order."""
    with open(path, "rb") as fh:
        if fh.read(len(KV_DUMP_MAGIC)) != KV_DUMP_MAGIC:
            raise SnapshotError(f"{path} is not a statekeeper kv-dump file")
        while header := fh.read(_LEN.size):
            key = fh.read(_LEN.unpack(header)[0])
            value = fh.read(_LEN.unpack(fh.read(_LEN.size))[0])
            yield key, value
