"""The driver's snapshot bookkeeping: requests asked, taken by a batch, tracked per task
until uploaded or failed, scheduled by interval, confirmed from the storage's manifests."""

from __future__ import annotations

from pathlib import Path

from statekeeper.app.snapshot_requests import SnapshotRequests
from statekeeper.snapshots import SnapshotStorage


def _staged(request_id: str, task: str, **extra) -> dict:
    return {
        "event": "staged",
        "request_id": request_id,
        "task": task,
        "batch_id": 7,
        "snapshot_ids": {"counts": f"id-{task}"},
        "pause_ms": 1.5,
        **extra,
    }


def test_a_request_is_taken_by_one_batch_and_ends_uploaded():
    requests = SnapshotRequests()
    first = requests.request("endpoint")
    assert requests.request("cli")["request_id"] == first["request_id"]  # joins the pending one
    rid = requests.take(7, ["0_0", "0_1"])
    assert rid == first["request_id"] and not requests.pending and requests.running
    assert requests.take(8, ["0_0"]) is None  # taken once
    requests.note_events([_staged(rid, "0_0"), _staged(rid, "0_1")])
    assert requests.status()[rid]["state"] == "running"
    requests.note_events(
        [{**_staged(rid, "0_0"), "event": "uploaded", "bytes_uploaded": 10, "upload_seconds": 0.1}]
    )
    requests.note_events([{"event": "skipped", "request_id": rid, "task": "0_1", "reason": "x"}])
    status = requests.status()[rid]
    assert status["state"] == "uploaded" and status["batch_id"] == 7
    task = requests.task_status()["0_0"]
    assert task["state"] == "uploaded" and task["bytes_uploaded"] == 10
    assert task["pause_ms"] == 1.5 and task["last_uploaded"]["snapshot_ids"] == {"counts": "id-0_0"}


def test_a_failed_upload_fails_the_request_and_names_the_error():
    requests = SnapshotRequests()
    requests.request()
    rid = requests.take(3, ["0_0", "0_1"])
    requests.note_events([_staged(rid, "0_0"), _staged(rid, "0_1")])
    requests.note_events(
        [
            {**_staged(rid, "0_0"), "event": "uploaded"},
            {
                "event": "failed",
                "request_id": rid,
                "task": "0_1",
                "phase": "upload",
                "error": "boom",
            },
        ]
    )
    status = requests.status()[rid]
    assert status["state"] == "failed"
    assert status["errors"] == [{"task": "0_1", "phase": "upload", "error": "boom"}]
    assert requests.task_status()["0_1"]["error"] == "boom"
    assert not requests.running


def test_schedule_asks_when_the_interval_passed_and_nothing_is_under_way():
    off = SnapshotRequests(0)
    off.schedule(last_batch_end=1e9, now=1e9)
    assert not off.pending
    scheduled = SnapshotRequests(10)
    start = scheduled._last_scheduled
    scheduled.schedule(last_batch_end=start, now=start + 5)
    assert not scheduled.pending
    scheduled.schedule(last_batch_end=start, now=start + 11)
    assert scheduled.pending
    rid = scheduled.take(1, ["0_0"])
    scheduled.schedule(last_batch_end=start + 100, now=start + 30)  # one is still running
    assert not scheduled.pending
    scheduled.note_events([{"event": "skipped", "request_id": rid, "task": "0_0"}])
    assert scheduled.status()[rid]["source"] == "schedule"
    # No batch ran since that snapshot was taken: the state is unchanged, no new one.
    taken = scheduled._last_taken
    scheduled.schedule(last_batch_end=taken - 1, now=taken + 100)
    assert not scheduled.pending
    scheduled.schedule(last_batch_end=taken + 1, now=taken + 100)
    assert scheduled.pending


def test_uploads_are_confirmed_from_the_manifests_in_the_storage(tmp_path: Path):
    storage = SnapshotStorage((tmp_path / "snaps").as_uri(), "app")
    requests = SnapshotRequests(storage=lambda: storage)
    requests.request()
    rid = requests.take(7, ["0_0", "0_1"])
    requests.note_events([_staged(rid, "0_0"), _staged(rid, "0_1")])
    requests.confirm_uploads()
    assert requests.status()[rid]["tasks"] == {"0_0": "staged", "0_1": "staged"}
    for task in ("0_0", "0_1"):  # what a finished upload writes last
        path = Path(storage.manifest_path(task, "counts", f"id-{task}"))
        path.parent.mkdir(parents=True)
        path.write_text("{}")
        requests.confirm_uploads()
    assert requests.status()[rid]["state"] == "uploaded"
    assert requests.task_status()["0_1"]["state"] == "uploaded"


def test_nothing_to_snapshot_ends_at_once():
    requests = SnapshotRequests()
    requests.request()
    rid = requests.take(None, [])
    assert requests.status()[rid]["state"] == "uploaded"
