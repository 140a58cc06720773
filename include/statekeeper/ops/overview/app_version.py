"""An app's version for the State stores page: the topology fingerprint its state root
records, whether it is the active version, and its cut-overs and rollbacks (newest first).
Read-only: two small files of the state root."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statekeeper.versions.history import desired_running, read_history
from statekeeper.versions.recorded import read_recorded, state_root


def app_version(state_dir: Path, application_id: str, spec_enabled: bool) -> dict[str, Any]:
    root = state_root(state_dir, application_id)
    recorded = read_recorded(root)
    run, why, _at = desired_running(spec_enabled, root, application_id)
    return {
        "digest": None if recorded is None else recorded.digest[:12],
        "active": run,
        "why": why,
        "upgrades": [
            {
                "kind": e.kind,
                "from_app": e.from_app,
                "to_app": e.to_app,
                "stage": e.stage,
                "at": e.at,
                "by": e.by,
                "error": e.details.get("error"),
                "batch_base": e.details.get("batch_base"),
                "verify": e.details.get("verify"),
            }
            for e in reversed(read_history(root))
        ],
    }
