"""RocksDB's memory per process: one block cache, the memtables of every store charged to
it and bounded together (stores.rocksdb_memory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from statekeeper.settings import StatekeeperSettings
from statekeeper.stores import rocksdb_memory
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.rocksdb import RocksDBKeyValueStore
from statekeeper.stores.rocksdb_memory import configure_rocksdb_memory

MIB = 1024 * 1024


@pytest.fixture
def restore_bound() -> Iterator[None]:
    before = rocksdb_memory.rocksdb_memory()
    yield
    configure_rocksdb_memory(before["block_cache_bytes"], before["write_buffer_bytes"])


def _write_36_mb(stores: list[RocksDBKeyValueStore]) -> bytes:
    """3 stores x 6 commits x 2,000 entries of 1,000 bytes."""
    value = os.urandom(1000)
    for round_no in range(6):
        for i, store in enumerate(stores):
            for k in range(2_000):
                store.put(b"%d-%d-%06d" % (i, round_no, k), value)
            store.commit(StoreMetadata(changelog_offset=round_no))
    return value


def _usage() -> int:
    return int(rocksdb_memory.rocksdb_memory()["write_buffer_usage_bytes"])


@pytest.mark.parametrize("write_buffer_mib", [4, 64])
def test_the_memtables_of_all_stores_are_flushed_at_the_shared_bound(
    tmp_path: Path, restore_bound: None, write_buffer_mib: int
) -> None:
    """RocksDB's bound is soft: a write that finds the memtables past it flushes the memtables
    of the database written, in the background. So the bound holds at the next writes of each
    store (a store not written again keeps its memtable: CI once saw 14.7 MB settle with
    4 MiB after the last commit). With 4 MiB the ~36 MB written here, then one small commit
    per store at a time, settle within twice the bound; with 64 MiB nothing is flushed, so
    the bound is what flushes (each store alone would keep 64 MiB memtables)."""
    configure_rocksdb_memory(128 * MIB, write_buffer_mib * MIB)
    stores = [RocksDBKeyValueStore(f"s{i}", tmp_path / f"s{i}") for i in range(3)]
    try:
        value = _write_36_mb(stores)
        if write_buffer_mib == 64:
            assert _usage() >= 30 * MIB, rocksdb_memory.rocksdb_memory()
        else:
            deadline = time.monotonic() + 20
            nudge = 0
            while _usage() > 2 * write_buffer_mib * MIB:
                assert time.monotonic() < deadline, rocksdb_memory.rocksdb_memory()
                store = stores[nudge % len(stores)]
                store.put(b"nudge", b"%d" % nudge)
                store.commit(StoreMetadata(changelog_offset=6 + nudge))
                nudge += 1
                time.sleep(0.05)
        report = rocksdb_memory.rocksdb_memory()
        assert (report["block_cache_bytes"], report["write_buffer_bytes"]) == (
            128 * MIB,
            write_buffer_mib * MIB,
        )
        assert report["block_cache_usage_bytes"] >= report["write_buffer_usage_bytes"]
        assert stores[0].get(b"0-0-000000") == value  # flushed data still reads back
    finally:
        for store in stores:
            store.close()


def test_the_memtables_cannot_exceed_the_cache() -> None:
    with pytest.raises(ValueError, match="must not exceed block_cache_bytes"):
        configure_rocksdb_memory(8 * MIB, 9 * MIB)


def test_before_any_configuration_the_bound_is_the_settings_default() -> None:
    """A process that opens stores without a StateEnvironment gets the settings' defaults."""
    code = "import json; from statekeeper.stores import rocksdb_memory as m; "
    code += "print(json.dumps(m.rocksdb_memory()))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    fresh = json.loads(out.stdout)
    defaults = StatekeeperSettings()
    assert (fresh["block_cache_bytes"], fresh["write_buffer_bytes"]) == (
        defaults.block_cache_bytes,
        defaults.write_buffer_bytes,
    )
