"""Read-only views (RocksDB secondaries) of a store another handle keeps open for writing:
each read shows one whole commit, through flushes and compactions of the primary."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from statekeeper.query.copies import (
    CopyUnavailableError,
    ReadWouldWaitError,
    ReadWriteLock,
    StoreCopy,
)
from statekeeper.stores.base import StoreMetadata
from statekeeper.stores.rocksdb import RocksDBKeyValueStore

KEYS = 2_000


def _commit(store: RocksDBKeyValueStore, batch: int) -> None:
    store.put_all([(b"k%05d" % i, b"%d" % batch) for i in range(KEYS)])
    store.commit(StoreMetadata(batch * 10, batch, {"in:0": batch}))


def _read(copy: StoreCopy) -> tuple[set[bytes], int | None, int]:
    with copy.reading() as reader:
        values = {value for _, value in reader.kv.after(None, False)}
        return values, reader.state.batch_id, reader.kv.approximate_num_entries()


def test_a_view_shows_each_commit_whole_through_flushes_and_compactions(tmp_path: Path) -> None:
    store = RocksDBKeyValueStore("counts", tmp_path / "db")
    copy = StoreCopy("counts", tmp_path / "db", tmp_path / "scratch")
    try:
        _commit(store, 1)
        copy.refresh()
        for batch in range(2, 30):
            _commit(store, batch)
            # What RocksDB does on its own as memtables fill and levels grow (and a snapshot's
            # checkpoint flush). A caught-up secondary answered the previous commit's values
            # with this commit's metadata after the compaction, so the view reopens instead.
            if batch % 3 == 0:
                store._db.flush()
            if batch % 7 == 0:
                store._db.compact_range(None, None)
            copy.refresh()
            values, batch_id, _ = _read(copy)
            assert (values, batch_id) == ({b"%d" % batch}, batch)
        assert copy.catch_ups > 5 and copy.reopens > 5  # both paths ran
        caught_up = copy.catch_ups
        copy.refresh()  # nothing changed: no catch-up
        assert copy.catch_ups == caught_up
    finally:
        copy.close()
        store.close()


def test_a_view_writes_nothing_in_the_live_directory(tmp_path: Path) -> None:
    # Any rocksdict open rewrites rocksdict-config.json where it opens: the view opens a
    # mirror of links, so the writer's directory holds only what the writer wrote.
    live = tmp_path / "db"
    store = RocksDBKeyValueStore("counts", live)
    _commit(store, 1)
    config = live / "rocksdict-config.json"
    before = (config.stat().st_mtime_ns, config.stat().st_ino, config.read_bytes())
    copy = StoreCopy("counts", live, tmp_path / "scratch")
    try:
        for batch in range(2, 8):
            copy.refresh()
            _commit(store, batch)
            if batch % 2 == 0:
                store._db.flush()
        copy.refresh()
        assert _read(copy)[1] == 7 and copy.catch_ups and copy.reopens > 1
        assert (config.stat().st_mtime_ns, config.stat().st_ino, config.read_bytes()) == before
        assert not any(p.is_symlink() for p in live.iterdir())
    finally:
        copy.close()
        store.close()
    assert not list((tmp_path / "scratch").iterdir())  # mirror and info logs gone


def test_a_view_without_a_store_is_unavailable_until_one_is_committed(tmp_path: Path) -> None:
    copy = StoreCopy("counts", tmp_path / "db", tmp_path / "scratch")
    try:
        with pytest.raises(CopyUnavailableError, match="no copy of store counts"):
            copy.refresh()
        store = RocksDBKeyValueStore("counts", tmp_path / "db")
        try:
            copy.refresh()
            assert not copy.state.committed  # opened, nothing committed yet
            _commit(store, 1)
            copy.refresh()
            assert copy.state.committed and copy.state.as_dict()["source_offsets"] == {"in:0": 1}
        finally:
            store.close()
    finally:
        copy.close()


def test_the_read_write_lock_lets_a_waiting_writer_go_before_new_readers() -> None:
    lock = ReadWriteLock()
    order: list[str] = []
    first_reader_in = threading.Event()
    release_first = threading.Event()

    def reader(name: str, hold: threading.Event | None) -> None:
        with lock.shared():
            order.append(name)
            if hold is not None:
                first_reader_in.set()
                hold.wait(5)

    def writer() -> None:
        with lock.exclusive():
            order.append("writer")

    first = threading.Thread(target=reader, args=("r1", release_first))
    first.start()
    assert first_reader_in.wait(5)
    w = threading.Thread(target=writer)
    w.start()
    time.sleep(0.05)  # the writer now waits for r1
    late = threading.Thread(target=reader, args=("r2", None))
    late.start()
    time.sleep(0.05)
    assert order == ["r1"]  # r2 queues behind the waiting writer
    release_first.set()
    for t in (first, w, late):
        t.join(5)
    assert order == ["r1", "writer", "r2"]


def test_a_read_that_must_not_wait_is_refused_until_the_view_has_followed(
    tmp_path: Path,
) -> None:
    """The query server's event loop reads with ``wait=False``: it never catches up, opens or
    waits for a catch-up, and never answers from a view the primary has moved past."""
    store = RocksDBKeyValueStore("counts", tmp_path / "db")
    copy = StoreCopy("counts", tmp_path / "db", tmp_path / "scratch")
    try:
        _commit(store, 1)
        with pytest.raises(ReadWouldWaitError):
            copy.refresh(wait=False)  # never opened
        copy.refresh()
        copy.refresh(wait=False)  # current: nothing to do
        with copy.reading(wait=False) as reader:
            assert reader.state.batch_id == 1
        _commit(store, 2)
        with pytest.raises(ReadWouldWaitError, match="must follow the primary"):
            copy.refresh(wait=False)
        assert copy.state.batch_id == 1 and copy.catch_ups == 0
        copy.refresh()
        copy.refresh(wait=False)
        assert _read(copy)[:2] == ({b"2"}, 2)

        holding, release = threading.Event(), threading.Event()

        def catch_up() -> None:  # what a catch-up or a swap holds while it runs
            with copy._lock.exclusive():
                holding.set()
                release.wait(5)

        t = threading.Thread(target=catch_up)
        t.start()
        assert holding.wait(5)
        try:
            with pytest.raises(ReadWouldWaitError), copy.reading(wait=False):
                pass
        finally:
            release.set()
            t.join(5)
        with copy.reading(wait=False) as reader:
            assert reader.state.batch_id == 2
    finally:
        copy.close()
        store.close()


def test_a_read_during_another_threads_catch_up_shows_a_recent_commit_or_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one read follows the primary, the others may answer from the view's last state
    only if it was known current within ``max_staleness_s``. After a quiet spell they wait:
    the failover bench once had gets answered from a commit two minutes old (keys the task
    had long committed answered "not found") while the first get back reopened the view."""
    store = RocksDBKeyValueStore("counts", tmp_path / "db")
    copy = StoreCopy("counts", tmp_path / "db", tmp_path / "scratch", max_staleness_s=60.0)
    opening, release = threading.Event(), threading.Event()
    open_settled = copy._open_settled

    def slow_open_settled():  # type: ignore[no-untyped-def]
        opening.set()
        assert release.wait(10)
        return open_settled()

    def follow() -> None:
        copy.refresh()

    try:
        _commit(store, 1)
        copy.refresh()
        monkeypatch.setattr(copy, "_open_settled", slow_open_settled)

        # Within the bound: the view's state (batch 1, current a moment ago) is answered.
        _commit(store, 2)
        store._db.flush()  # the MANIFEST moves: the view reopens
        first = threading.Thread(target=follow)
        first.start()
        assert opening.wait(10)
        copy.refresh(wait=False)
        copy.refresh()
        assert _read(copy)[:2] == ({b"1"}, 1)
        release.set()
        first.join(10)
        assert _read(copy)[:2] == ({b"2"}, 2)

        # Past the bound: reads wait for the follower, then show its commit.
        copy.max_staleness_s = 0.05
        opening.clear()
        release.clear()
        _commit(store, 3)
        store._db.flush()
        time.sleep(0.1)
        first = threading.Thread(target=follow)
        first.start()
        assert opening.wait(10)
        with pytest.raises(ReadWouldWaitError, match="following the primary"):
            copy.refresh(wait=False)
        seen: list[tuple[set[bytes], int | None]] = []

        def read_after_refresh() -> None:
            copy.refresh()
            seen.append(_read(copy)[:2])

        waiting = threading.Thread(target=read_after_refresh)
        waiting.start()
        waiting.join(0.3)
        assert waiting.is_alive() and not seen  # it waits for the follower
        release.set()
        first.join(10)
        waiting.join(10)
        assert seen == [({b"3"}, 3)]
    finally:
        release.set()
        copy.close()
        store.close()
