"""An app's upgrade history: ``<state_dir>/<app>/upgrades.json``.

A cut-over from version A (one application id) to version B (another) and a rollback from B
to A are events written to both apps' state roots, newest last. The newest event naming an
app says whether it should run: the version cut over to, or rolled back to, is *active*; the
one cut over from, or rolled back from, is *superseded* and stays stopped whatever its spec's
``enabled`` says. Supervision reads it (:func:`active_override`), the State stores page shows
it. The event that stops the old version is written before it is stopped, so a watch that
finds it gone knows it was not a crash.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.atomic_file import replace_text
from statekeeper.errors import StatekeeperError

UPGRADES_FILE = "upgrades.json"
#: Events kept per app (newest last).
KEEP = 50

CUTOVER = "cutover"
ROLLBACK = "rollback"
KINDS = (CUTOVER, ROLLBACK)

#: What a cut-over went through: started (the old version is being stopped), done.
STARTED = "started"
DONE = "done"
FAILED = "failed"


@dataclass(frozen=True)
class UpgradeEvent:
    """One cut-over (``from_app`` -> ``to_app``) or rollback (``from_app``, the version left,
    -> ``to_app``, the version run again); ``stage`` started | done | failed; ``details``:
    the takeover's batch base, the verification's counts, the error."""

    kind: str
    from_app: str
    to_app: str
    stage: str
    at: float = field(default_factory=time.time)
    by: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Any) -> UpgradeEvent:
        return cls(
            kind=str(doc["kind"]),
            from_app=str(doc["from_app"]),
            to_app=str(doc["to_app"]),
            stage=str(doc["stage"]),
            at=float(doc["at"]),
            by=str(doc.get("by", "")),
            details=dict(doc.get("details") or {}),
        )


def history_path(root: Path) -> Path:
    return Path(root) / UPGRADES_FILE


def read_history(root: Path) -> list[UpgradeEvent]:
    """The app's events, oldest first ([] when it never took part in an upgrade)."""
    path = history_path(root)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, json.JSONDecodeError) as exc:
        raise StatekeeperError(f"{path} cannot be read: {exc}") from None
    try:
        return [UpgradeEvent.from_json(e) for e in doc["events"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise StatekeeperError(f"{path} is not an upgrade history: {exc}") from None


def record_event(roots: list[Path], event: UpgradeEvent) -> None:
    """Append ``event`` to the history of each state root in ``roots`` (atomically each)."""
    if event.kind not in KINDS:
        raise ValueError(f"unknown upgrade event kind {event.kind!r}")
    for root in roots:
        events = read_history(root) + [event]
        doc = {"events": [e.to_json() for e in events[-KEEP:]]}
        replace_text(history_path(root), json.dumps(doc, indent=1) + "\n")


def active_override(root: Path, application_id: str) -> tuple[bool, UpgradeEvent] | None:
    """Whether the app should run by its newest upgrade event (with the event), or None when
    no event names it (its spec's ``enabled`` decides). A failed cut-over leaves the old
    version active and the new one not; an unreadable history names nothing."""
    try:
        events = read_history(root)
    except StatekeeperError:
        return None
    for event in reversed(events):
        if application_id not in (event.from_app, event.to_app):
            continue
        if event.stage == FAILED:
            return application_id == event.from_app, event
        return application_id == event.to_app, event
    return None


def desired_running(
    spec_enabled: bool, root: Path, application_id: str
) -> tuple[bool, str, float | None]:
    """Whether supervision should keep the app running: its newest upgrade event decides
    when there is one, else its spec's ``enabled``. Returns (run?, why, the deciding
    event's time or None)."""
    found = active_override(root, application_id)
    if found is None:
        why = "enabled in its spec" if spec_enabled else "disabled in its spec (enabled: false)"
        return spec_enabled, why, None
    active, event = found
    other = event.from_app if event.to_app == application_id else event.to_app
    if active:
        return True, f"active since the {event.kind} from {other} ({event.stage})", event.at
    return False, f"superseded by {other} ({event.kind} {event.stage})", event.at
