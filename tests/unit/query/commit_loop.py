"""Child process for the query tests: commits batches to one task store as the task would
(RocksDB store classes, one WriteBatch per commit) until its time is up. Batch N sets every
key to N, so a reader that sees two values from one commit saw a half-written batch.

Usage: python commit_loop.py <store dir> <keys> <seconds>; prints the batches committed."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.builders import Stores, build_store

SPEC = Stores.persistent("counts").with_serdes("str", "int")


def main() -> None:
    path, keys, seconds = Path(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    store = build_store(SPEC, path, None)
    names = [f"user-{i:05d}" for i in range(keys)]
    batch = store.read_metadata().batch_id or 0
    deadline = time.monotonic() + seconds
    print("ready", flush=True)
    while time.monotonic() < deadline:
        batch += 1
        store.put_all([(name, batch) for name in names])
        store.commit(StoreMetadata(batch * 10, batch, {"in:0": batch}))
        time.sleep(0.005)
    store.close()
    print(batch, flush=True)


if __name__ == "__main__":
    main()
