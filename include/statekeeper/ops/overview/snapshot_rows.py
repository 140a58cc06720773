"""An app's snapshots: the newest ones with age and size, and the latest per task and store."""

from __future__ import annotations

from typing import Any

from statekeeper.settings import StatekeeperSettings
from statekeeper.snapshots.catalog import list_snapshots
from statekeeper.snapshots.manifest import SnapshotError, utc_now
from statekeeper.snapshots.storage import snapshot_url_for, storage_for


def snapshot_summary(settings: StatekeeperSettings, limit: int = 40) -> dict[str, Any]:
    """``{url, count, bytes, latest: {"<task>/<store>": row}, recent: [row, ...]}``, newest
    first; ``bytes`` adds up each snapshot's files (files shared between snapshots are
    stored once, so the storage holds at most that much). An app without any snapshot yet
    has ``count`` 0 and a ``note`` saying so."""
    url = snapshot_url_for(settings)
    try:
        storage = storage_for(settings, create=False)
    except SnapshotError as exc:  # the app has never been snapshotted there
        return {"url": url, "count": 0, "bytes": 0, "latest": {}, "recent": [], "note": str(exc)}
    now = utc_now()
    manifests = list_snapshots(storage)[::-1]
    rows = [
        {
            "snapshot_id": m.snapshot_id,
            "task": m.task,
            "store": m.store,
            "store_kind": m.store_kind,
            "created_at": m.created_at,
            "age_s": max(0.0, (now - m.created).total_seconds()),
            "bytes": m.total_bytes,
            "key_count": m.key_count,
            "batch_id": m.batch_id,
        }
        for m in manifests
    ]
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        latest.setdefault(f"{row['task']}/{row['store']}", row)
    return {
        "url": url,
        "count": len(rows),
        "bytes": sum(r["bytes"] for r in rows),
        "latest": dict(sorted(latest.items())),
        "recent": rows[:limit],
    }
