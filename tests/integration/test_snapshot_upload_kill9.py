"""kill -9 of a process in the middle of a snapshot upload: the snapshot is never listed as
complete (its manifest is written last), and what it left behind — shared files nothing
references, ``staging/`` uploads, the local staging copy — is cleaned up afterwards
(``prune`` in the storage, the next worker of the state directory locally). file:// and S3
(moto server on loopback)."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotStorage, list_snapshots, prune, verify_snapshot
from statekeeper.worker.task_snapshots import STAGING_FOLDER, TaskSnapshots
from statekeeper.worker.upload_spool import SpoolUploader, UploadSpool, spool_dir

ROOT = Path(__file__).resolve().parents[2]


def _upload_and_kill(
    broker, tmp_path: Path, app: str, url: str, options: dict, spool: bool = False
) -> int:
    stderr_path = tmp_path / "child.stderr"
    with stderr_path.open("w") as stderr:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.snapshot_upload_child",
                "--bootstrap",
                broker.bootstrap_servers,
                "--state-dir",
                str(tmp_path / "state"),
                "--app",
                app,
                "--url",
                url,
                "--options",
                json.dumps(options),
                *(["--spool"] if spool else []),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        lines = _lines_until(child, "UPLOADING", timeout_s=120)
        assert "UPLOADING" in lines, (
            f"the child never reached its upload: {lines}; stderr: "
            f"{stderr_path.read_text()[-3000:]}"
        )
        staged = json.loads(lines[0])
        assert [e["event"] for e in staged] == ["staged"]
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child.pid


def _lines_until(child: subprocess.Popen, last: str, timeout_s: float) -> list[str]:
    """The child's stdout lines up to ``last``, its end, or ``timeout_s`` (a child that hangs
    must fail the test with what it printed, not block it): a thread reads, this waits."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in child.stdout:  # type: ignore[union-attr]
            lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        try:
            line = lines.get(timeout=left)
        except queue.Empty:
            break
        if line is None:
            break
        seen.append(line)
        if line == last:
            break
    return seen


@pytest.mark.parametrize("kind", ["file", "s3"])
def test_snapshot_killed_mid_upload_is_never_listed_and_is_cleaned_up(
    broker, tmp_path, topic_name, kind, request
):
    if kind == "s3":
        moto_s3 = request.getfixturevalue("moto_s3")
        bucket = f"kill9-{topic_name[-8:]}".lower()
        moto_s3.make_bucket(bucket)
        url, options = f"s3://{bucket}/snaps", moto_s3.options
    else:
        url, options = (tmp_path / "snaps").as_uri(), {}
    pid = _upload_and_kill(broker, tmp_path, topic_name, url, options)

    storage = SnapshotStorage(url, topic_name, **options)
    assert list_snapshots(storage) == []  # no manifest: not a snapshot
    orphans = storage.shared_files()
    assert len(orphans) >= 1  # the file that got through before the kill
    leftovers = storage.leftovers()
    if storage.local:  # the stuck file, written to staging/ but never moved into shared/
        assert leftovers
    local_staging = [p for p in (tmp_path / "state" / STAGING_FOLDER).iterdir()]
    assert [p.name.split("-")[0] for p in local_staging] == [str(pid)]

    # Within the grace period prune leaves them: they may belong to an upload in flight.
    report = prune(storage, keep=1)
    assert report.deleted_shared == [] and report.deleted_leftovers == []
    assert storage.shared_files() == orphans

    report = prune(storage, keep=1, grace=timedelta(0))
    assert sorted(report.deleted_shared) == sorted(orphans)
    assert sorted(report.deleted_leftovers) == sorted(leftovers)
    assert storage.shared_files() == {} and storage.leftovers() == {}

    # The next worker process of this state directory removes the dead one's local copy.
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        state_dir=tmp_path / "state",
        application_id=topic_name,
        snapshot_url=url,
    )
    snapshots = TaskSnapshots(settings)
    try:
        assert not any(p.exists() for p in local_staging)
    finally:
        snapshots.close()


def test_a_spooled_upload_killed_mid_way_is_finished_by_the_next_uploader(
    broker, tmp_path, topic_name
):
    """The task hands its staged copy to the executor's upload spool; the uploader (the
    service process's) is killed mid-upload. The job stays spooled, and the next uploader
    uploads it whole: one verified snapshot, its event drained once, no copy left."""
    url = (tmp_path / "snaps").as_uri()
    _upload_and_kill(broker, tmp_path, topic_name, url, {}, spool=True)
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        state_dir=tmp_path / "state",
        application_id=topic_name,
        snapshot_url=url,
        executor_services_process=True,
    )
    spool = UploadSpool(spool_dir(settings.state_dir, topic_name))
    assert spool.pending == 1  # the killed upload's job is still there
    storage = SnapshotStorage(url, topic_name)
    assert list_snapshots(storage) == []

    uploader = SpoolUploader(settings, settings.state_dir)
    try:
        deadline = time.monotonic() + 60
        while spool.pending:
            assert time.monotonic() < deadline, "the next uploader left the job spooled"
            time.sleep(0.05)
    finally:
        uploader.close()
    snapshots = list_snapshots(storage)
    assert [m.task for m in snapshots] == ["0_0"] * len(snapshots) and snapshots
    assert all(verify_snapshot(storage, m).ok for m in snapshots)
    events = spool.drain()
    assert [e["event"] for e in events] == ["uploaded"] and spool.drain() == []
    assert events[0]["snapshot_ids"] == {m.store: m.snapshot_id for m in snapshots}
    assert not any(p.is_file() for p in spool.folder.rglob("*"))  # nothing left spooled
