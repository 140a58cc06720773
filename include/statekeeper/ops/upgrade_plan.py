"""``statekeeper upgrade plan``: what running a new version of an app on its state means.

The new version is a topology (from the app's spec) with the source partition counts the
broker has now (when it answers; else partition changes are not checked, and a note says
so). The state's version is the fingerprint recorded where the state is: by default the
state root (``<state_dir>/<app>/topology.json``), else the newest snapshot's manifest; or a
given state directory, fingerprint file or snapshot id. The comparison is
:func:`statekeeper.versions.compatibility.compare`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.errors import ConfigError, StatekeeperError
from statekeeper.settings import StatekeeperSettings
from statekeeper.versions.compatibility import UpgradePlan, compare
from statekeeper.versions.fingerprint import TopologyFingerprint, fingerprint_of
from statekeeper.versions.recorded import TOPOLOGY_FILE, read_recorded, state_root


@dataclass(frozen=True)
class UpgradeReport:
    """The plan, where the state's fingerprint came from, and what could not be checked."""

    application_id: str
    against: str
    plan: UpgradePlan
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        plan = self.plan.as_dict()
        return {
            "application_id": self.application_id,
            "against": self.against,
            **plan,
            "notes": [*self.notes, *plan["notes"]],
        }


def plan_upgrade(
    settings: StatekeeperSettings,
    topology: Any,
    *,
    against: Path | None = None,
    snapshot_id: str | None = None,
    ask_broker: bool = True,
    timeout_s: float = 5.0,
) -> UpgradeReport:
    """The plan of running ``topology`` on the app's state (module docstring); ``against``
    and ``snapshot_id`` name where the state's fingerprint is, when not the default."""
    where, old = recorded_fingerprint(settings, against=against, snapshot_id=snapshot_id)
    partitions, notes = None, ()
    if ask_broker:
        partitions, note = current_partitions(settings, topology, timeout_s)
        notes = (note,) if note else ()
    else:
        notes = ("the broker was not asked: source partition counts are not compared",)
    new = fingerprint_of(topology, settings.application_id, partitions)
    return UpgradeReport(settings.application_id, where, compare(old, new), notes)


def recorded_fingerprint(
    settings: StatekeeperSettings, *, against: Path | None = None, snapshot_id: str | None = None
) -> tuple[str, TopologyFingerprint]:
    """Where the state's fingerprint is recorded, and the fingerprint."""
    if snapshot_id is not None:
        return _snapshot(settings, snapshot_id)
    if against is not None:
        return _file(Path(against), settings.application_id)
    root = state_root(settings.state_dir, settings.application_id)
    found = read_recorded(root)
    if found is not None:
        return str(root / TOPOLOGY_FILE), found
    newest = _newest_snapshot(settings)
    if newest is not None:
        return newest
    raise ConfigError(
        f"app {settings.application_id}: no topology recorded for its state: no "
        f"{root / TOPOLOGY_FILE} and no snapshot records one (the app has not started since "
        "statekeeper records them); name one with --against or --from-snapshot"
    )


def _file(path: Path, application_id: str) -> tuple[str, TopologyFingerprint]:
    """A fingerprint file, a state root holding one, or a state_dir holding the app's."""
    for candidate in (path, path / TOPOLOGY_FILE, path / application_id / TOPOLOGY_FILE):
        if candidate.is_file():
            text = candidate.read_text(encoding="utf-8")
            return str(candidate), TopologyFingerprint.from_json(text, where=str(candidate))
    raise ConfigError(
        f"--against {path}: no {TOPOLOGY_FILE} there, nor in {path / application_id} (give a "
        "state_dir, an app's state root or a fingerprint file)"
    )


def _snapshot(settings: StatekeeperSettings, snapshot_id: str) -> tuple[str, TopologyFingerprint]:
    from statekeeper.snapshots.recorded_topology import snapshot_topology
    from statekeeper.snapshots.storage import storage_for

    manifest, raw = snapshot_topology(storage_for(settings, create=False), snapshot_id)
    where = f"snapshot {manifest.snapshot_id}"
    return where, TopologyFingerprint.from_dict(raw, where)


def _newest_snapshot(settings: StatekeeperSettings) -> tuple[str, TopologyFingerprint] | None:
    from statekeeper.snapshots.manifest import NoSnapshotsYetError
    from statekeeper.snapshots.recorded_topology import newest_recorded_topology
    from statekeeper.snapshots.storage import storage_for

    try:
        found = newest_recorded_topology(storage_for(settings, create=False))
    except NoSnapshotsYetError:
        return None
    if found is None:
        return None
    manifest, raw = found
    where = f"snapshot {manifest.snapshot_id}"
    return where, TopologyFingerprint.from_dict(raw, where)


def current_partitions(
    settings: StatekeeperSettings, topology: Any, timeout_s: float
) -> tuple[dict[str, int] | None, str | None]:
    """The broker's partition count of each source topic that exists, or None and why not
    (the broker did not answer within ``timeout_s``)."""
    from statekeeper.kafka.admin import make_admin, partition_count, wait_for_broker

    topics = topology.source_topics(settings.application_id)
    try:
        wait_for_broker(settings.bootstrap_servers, timeout_s)
        admin = make_admin(settings.bootstrap_servers)
        counts = {t: partition_count(admin, t, timeout_s) for t in topics}
    except StatekeeperError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return None, f"source partition counts not read, so not compared: {first}"
    missing = sorted(t for t, n in counts.items() if n is None)
    found = {t: n for t, n in counts.items() if n is not None}
    note = f"source topic(s) {', '.join(missing)} do not exist yet" if missing else None
    return found, note
