"""The upload spool's task side: a hand-over moves the staged folders (never copies), a
full spool refuses with an event, and each finished upload's event is drained once."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from statekeeper.worker import upload_spool
from statekeeper.worker.snapshot_uploader import UploadJob
from statekeeper.worker.upload_spool import UploadSpool


@dataclass
class _Store:
    directory: Path


@dataclass
class _Staged:
    staged: _Store


def _job(tmp_path: Path, name: str) -> UploadJob:
    folder = tmp_path / "staging" / name
    folder.mkdir(parents=True)
    (folder / "000001.sst").write_bytes(b"x" * 10)
    return UploadJob("req", "0_0", 3, [_Staged(_Store(folder))], 1.0, 2.0)


def test_a_hand_over_moves_the_staged_folder_into_one_job(tmp_path: Path) -> None:
    spool = UploadSpool(tmp_path / "spool")
    job = _job(tmp_path, "a")
    inode = (job.staged[0].staged.directory / "000001.sst").stat().st_ino
    assert spool.submit(job) is None
    assert spool.pending == 1 and not job.staged[0].staged.directory.exists()
    (folder,) = spool.job_folders()
    assert (folder / "0" / "000001.sst").stat().st_ino == inode  # moved, not copied
    assert (folder / "job.pkl").is_file() and list(spool.incoming.iterdir()) == []


def test_a_full_spool_drops_the_new_job_and_says_so(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(upload_spool, "SPOOL_MAX_JOBS", 2)
    spool = UploadSpool(tmp_path / "spool")
    assert spool.submit(_job(tmp_path, "a")) is None
    assert spool.submit(_job(tmp_path, "b")) is None
    dropped = _job(tmp_path, "c")
    refused = spool.submit(dropped)
    assert refused is not None and refused["event"] == "failed" and refused["phase"] == "queue"
    assert "2 snapshots already wait" in refused["error"]
    assert not dropped.staged[0].staged.directory.exists() and spool.pending == 2


def test_events_are_drained_once_in_order(tmp_path: Path) -> None:
    spool = UploadSpool(tmp_path / "spool")
    for name in ("002-b", "001-a"):
        (spool.events / f"{name}.json").write_text(json.dumps({"event": "uploaded", "n": name}))
    other = UploadSpool(tmp_path / "spool")  # another worker of the executor
    assert [e["n"] for e in spool.drain()] == ["001-a", "002-b"]
    assert other.drain() == [] and spool.drain() == []
    assert list(spool.events.iterdir()) == []


def test_a_dead_workers_half_hand_over_is_removed(tmp_path: Path) -> None:
    spool = UploadSpool(tmp_path / "spool")
    dead = spool.incoming / "999999999-0001-abcd"  # no such pid
    dead.mkdir()
    (dead / "job.pkl").write_bytes(b"")
    UploadSpool(tmp_path / "spool")
    assert not dead.exists()
