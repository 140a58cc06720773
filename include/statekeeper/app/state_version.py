"""Before an app processes anything: may this topology run on the state it finds?

The app's part of :mod:`statekeeper.versions.start_check`: the fingerprint of the topology
with the source partition counts just read from the broker, the state root
(``<state_dir>/<app>/topology.json``) and, when the root records none and missing stores
are restored from snapshots, the newest snapshot's fingerprint. An incompatible state raises
:class:`~statekeeper.versions.start_check.IncompatibleStateError` (a ConfigError) unless
``allow_incompatible_state``; the snapshot lookup never fails a start (a storage that cannot
be read is logged and skipped, as a restore would fall back to the changelog).
"""

from __future__ import annotations

import logging
from typing import Any

from statekeeper.settings import StatekeeperSettings
from statekeeper.versions.fingerprint import TopologyFingerprint, fingerprint_of
from statekeeper.versions.recorded import state_root
from statekeeper.versions.start_check import check_state_version

log = logging.getLogger("statekeeper.app")


def check_state_at_start(
    settings: StatekeeperSettings, topology: Any, source_partitions: dict[str, int]
) -> TopologyFingerprint:
    """Check the state against ``topology`` (raises when it cannot run on it) and record the
    topology's fingerprint in the state root; returns the fingerprint."""
    fingerprint = fingerprint_of(topology, settings.application_id, source_partitions)
    check_state_version(
        state_root(settings.state_dir, settings.application_id),
        fingerprint,
        allow_incompatible=settings.allow_incompatible_state,
        recorded_elsewhere=lambda: newest_snapshot_fingerprint(settings),
    )
    return fingerprint


def newest_snapshot_fingerprint(
    settings: StatekeeperSettings,
) -> tuple[str, TopologyFingerprint] | None:
    """Where the state would come from when the state root has no record: the newest
    snapshot's fingerprint, when missing stores are restored from snapshots (else None)."""
    from statekeeper.snapshots.recorded_topology import newest_recorded_topology
    from statekeeper.snapshots.storage import storage_for
    from statekeeper.worker.task_snapshots import restores_from_snapshots

    if not restores_from_snapshots(settings):
        return None
    try:
        found = newest_recorded_topology(storage_for(settings, create=False))
        if found is None:
            return None
        manifest, raw = found
        where = f"snapshot {manifest.snapshot_id}"
        return where, TopologyFingerprint.from_dict(raw, where)
    except Exception as exc:  # no storage yet, or unreadable: nothing to compare with
        log.info("%s: no snapshot's topology read: %s", settings.application_id, exc)
        return None
