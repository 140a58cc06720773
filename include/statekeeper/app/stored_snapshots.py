"""The snapshots an app finds in its storage when it starts, per task.

A restarted app has uploaded nothing yet, but its tasks' newest snapshots are in the storage
from earlier runs: their age (``statekeeper_snapshot_age_seconds``) is known from the first
scrape on, so an alert on old snapshots does not go blind across restarts. An unreadable
manifest is skipped (and logged): it hides no other task's snapshots.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("statekeeper.app.snapshots")


def newest_stored_snapshots(settings: Any) -> dict[str, dict[str, Any]]:
    """Per task: ``created_at_s`` (epoch seconds) and ``snapshot_id`` of the oldest of its
    stores' newest snapshots (what a restore of the task would start from, at the latest).
    Empty when the app has no snapshot storage yet or it cannot be read (logged)."""
    from statekeeper.snapshots import read_catalog
    from statekeeper.snapshots.storage import storage_for

    try:
        catalog = read_catalog(storage_for(settings, create=False))
    except Exception as exc:  # no storage yet, or unreadable: the age stays unknown
        log.info("no stored snapshots read for %s: %s", settings.application_id, exc)
        return {}
    if catalog.unreadable:
        log.warning(
            "%s: %d unreadable snapshot manifest(s) skipped (see `statekeeper snapshot list`)",
            settings.application_id,
            len(catalog.unreadable),
        )
    manifests = catalog.manifests
    newest: dict[tuple[str, str], Any] = {}
    for manifest in manifests:  # oldest first: the last one per store wins
        newest[(manifest.task, manifest.store)] = manifest
    tasks: dict[str, dict[str, Any]] = {}
    for (task, _store), manifest in sorted(newest.items()):
        created = manifest.created.timestamp()
        if task not in tasks or created < tasks[task]["created_at_s"]:
            tasks[task] = {"snapshot_id": manifest.snapshot_id, "created_at_s": created}
    return tasks
