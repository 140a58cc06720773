"""RocksDB's memory in one process, bounded: one block cache and one write buffer manager
shared by every store the process opens (Kafka Streams' ``BoundedMemoryRocksDBConfig``
recipe for its ``RocksDBConfigSetter``).

RocksDB gives each database its own block cache and memtables (64 MiB write buffers, two per
column family, two column families per store), so a Spark Python worker holding many tasks'
stores would grow with their number. Here the memtables of all of them are charged to the
shared block cache (:func:`rocksdb_options` passes both to every store), so
``block_cache_bytes`` bounds what RocksDB holds in a process (data blocks, index and filter
blocks, memtables) and ``write_buffer_bytes`` is the memtables' share of it: when they reach
it, RocksDB flushes the largest. A Spark executor runs one Python worker per core, so an
executor's bound is its cores times ``block_cache_bytes``.
"""

from __future__ import annotations

import threading
from typing import Any

import rocksdict

_lock = threading.Lock()
_cache: rocksdict.Cache | None = None
_write_buffers: rocksdict.WriteBufferManager | None = None
# Until configure_rocksdb_memory: the settings' defaults (block_cache_bytes,
# write_buffer_bytes), for processes that open stores without a StateEnvironment.
_cache_bytes = 128 * 1024 * 1024
_write_buffer_bytes = 32 * 1024 * 1024


def configure_rocksdb_memory(cache_bytes: int, write_buffer_bytes: int) -> None:
    """Size the process's bound (before or after the first store opens: both resize)."""
    global _cache_bytes, _write_buffer_bytes
    if write_buffer_bytes > cache_bytes:
        raise ValueError(
            f"write_buffer_bytes ({write_buffer_bytes}) must not exceed block_cache_bytes "
            f"({cache_bytes}): the memtables are charged to the block cache"
        )
    with _lock:
        _cache_bytes, _write_buffer_bytes = cache_bytes, write_buffer_bytes
        if _cache is not None:
            _cache.set_capacity(cache_bytes)
        if _write_buffers is not None:
            _write_buffers.set_buffer_size(write_buffer_bytes)


def _shared() -> tuple[rocksdict.Cache, rocksdict.WriteBufferManager]:
    global _cache, _write_buffers
    with _lock:
        if _cache is None:
            _cache = rocksdict.Cache(_cache_bytes)
        if _write_buffers is None:
            # allow_stall off: a commit never blocks on a flush; the flush is triggered early.
            _write_buffers = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
                _write_buffer_bytes, False, _cache
            )
        return _cache, _write_buffers


def rocksdb_options() -> rocksdict.Options:
    """Options for a store's database and column families, within the process's bound."""
    cache, write_buffers = _shared()
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_paranoid_checks(True)
    opts.set_write_buffer_manager(write_buffers)
    table = rocksdict.BlockBasedOptions()
    table.set_block_cache(cache)
    opts.set_block_based_table_factory(table)
    return opts


def rocksdb_memory() -> dict[str, Any]:
    """The process's bound and what it uses now (bytes), for the status."""
    with _lock:
        cache, write_buffers = _cache, _write_buffers
        out: dict[str, Any] = {
            "block_cache_bytes": _cache_bytes,
            "write_buffer_bytes": _write_buffer_bytes,
        }
    out["block_cache_usage_bytes"] = cache.get_usage() if cache is not None else 0
    out["write_buffer_usage_bytes"] = write_buffers.get_usage() if write_buffers else 0
    return out
