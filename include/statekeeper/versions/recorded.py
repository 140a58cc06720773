"""The fingerprint an app recorded in its state root: ``<state_dir>/<app>/topology.json``.

Written at every start (atomically: a reader sees the old file or the new one), after the
start check (:mod:`statekeeper.versions.start_check`) let the topology run on the state: it
names the topology the state in that root was last written by.
"""

from __future__ import annotations

from pathlib import Path

from statekeeper.atomic_file import replace_text
from statekeeper.versions.fingerprint import FingerprintError, TopologyFingerprint

TOPOLOGY_FILE = "topology.json"


def state_root(state_dir: Path | str, application_id: str) -> Path:
    """``<state_dir>/<application_id>``: where an app keeps its task directories."""
    return Path(state_dir) / application_id


def recorded_path(root: Path) -> Path:
    return Path(root) / TOPOLOGY_FILE


def read_recorded(root: Path) -> TopologyFingerprint | None:
    """The fingerprint recorded in the state root ``root``, or None when there is none (a
    first start, or state written before fingerprints were recorded). A file that cannot
    be read raises :class:`~statekeeper.versions.fingerprint.FingerprintError`."""
    path = recorded_path(root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise FingerprintError(f"{path} cannot be read: {exc}") from exc
    return TopologyFingerprint.from_json(text, where=str(path))


def write_recorded(root: Path, fingerprint: TopologyFingerprint) -> Path:
    """Record ``fingerprint`` in the state root ``root`` (created if missing)."""
    path = replace_text(recorded_path(root), fingerprint.to_json() + "\n", durable=True)
    return path
