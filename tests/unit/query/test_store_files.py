"""The cheap "nothing moved" check a view runs before each answer: each kind of change the
primary makes must send the view to a full scan, and a directory that changed a moment
before its scan is never trusted to the cheap check."""

from __future__ import annotations

import os
import time
from pathlib import Path

from statekeeper.query.store_files import StoreFiles

# Longer than this filesystem's timestamp tick (a kernel tick): the product's default is
# 1.5 s for filesystems with whole-second times; the test keeps its waits short.
SETTLE_S = 0.3


def _settled_scan(files: StoreFiles):  # type: ignore[no-untyped-def]
    time.sleep(SETTLE_S + 0.1)
    seen = files.scan()
    assert seen.settled and files.unchanged(seen)
    return seen


def test_every_change_the_primary_makes_fails_the_cheap_check(tmp_path: Path) -> None:
    db = tmp_path / "db"
    db.mkdir()
    for name in ("000004.log", "MANIFEST-000005", "CURRENT", "IDENTITY", "000009.sst"):
        (db / name).write_bytes(b"x")
    files = StoreFiles(db, settle_s=SETTLE_S)

    fresh = files.scan()
    assert not fresh.settled and not files.unchanged(fresh)  # just written: scan again

    seen = _settled_scan(files)
    with open(db / "000004.log", "ab") as wal:  # a commit
        wal.write(b"y")
    assert not files.unchanged(seen) and files.scan() != seen

    seen = _settled_scan(files)
    with open(db / "MANIFEST-000005", "ab") as manifest:  # a flush or a compaction
        manifest.write(b"y")
    assert not files.unchanged(seen) and files.scan() != seen

    seen = _settled_scan(files)
    (db / "000010.log").write_bytes(b"")  # a new WAL, before the MANIFEST says so
    assert not files.unchanged(seen)
    assert {w[0] for w in files.scan().wal} == {"000004.log", "000010.log"}

    seen = _settled_scan(files)
    (db / "CURRENT.tmp").write_bytes(b"MANIFEST-000011\n")
    os.replace(db / "CURRENT.tmp", db / "CURRENT")  # a new MANIFEST named
    assert not files.unchanged(seen) and files.scan() != seen

    seen = _settled_scan(files)
    (db / "000012.sst").write_bytes(b"z")  # an SST alone: nothing a view shows
    assert not files.unchanged(seen)
    rescanned = files.scan()
    assert rescanned == seen and not rescanned.settled  # equal, but scanned again next time


def test_a_recreated_or_removed_directory_fails_the_cheap_check(tmp_path: Path) -> None:
    db = tmp_path / "db"
    db.mkdir()
    for name in ("000004.log", "MANIFEST-000005", "CURRENT", "IDENTITY"):
        (db / name).write_bytes(b"x")
    files = StoreFiles(db, settle_s=SETTLE_S)
    seen = _settled_scan(files)
    for name in os.listdir(db):
        os.unlink(db / name)
    db.rmdir()
    assert not files.unchanged(seen)
    assert files.scan().identity is None
    db.mkdir()
    for name in ("000004.log", "MANIFEST-000005", "CURRENT", "IDENTITY"):
        (db / name).write_bytes(b"x")
    time.sleep(SETTLE_S + 0.1)
    assert not files.unchanged(seen)  # same names and sizes, another directory
    assert files.scan() != seen  # another IDENTITY
