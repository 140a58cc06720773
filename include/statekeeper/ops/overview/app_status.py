"""Is the app running, and what did it last report? From its status endpoint or file.

The endpoint (``status_url`` in the status file) answers only while the app runs; its
document is live. Without an answer the file is the app's last word: a crashed app's file
still says RUNNING, so "running" needs an answering endpoint, or, for an app started
without one, a live process with the file's pid on this machine.
"""

from __future__ import annotations

import json
import os
import urllib.request
from dataclasses import dataclass
from typing import Any

from statekeeper.settings import StatekeeperSettings

#: States after which an app does no more work (its run ended, cleanly or not).
FINAL_STATES = ("NOT_RUNNING", "ERROR")


@dataclass
class AppStatus:
    """The app's status document (``{}`` if it never wrote one) and whether it runs now."""

    document: dict[str, Any]
    running: bool
    source: str  # "endpoint", "file" or "none"
    #: Why the app counts as running or not, in words for the page.
    note: str
    status_file: str
    status_url: str | None


def read_app_status(settings: StatekeeperSettings, timeout_s: float = 1.0) -> AppStatus:
    """The app's status: live from its endpoint when it answers within ``timeout_s``, else
    the last document in its status file."""
    path = settings.status_path()
    try:
        last = json.loads(path.read_text())
    except FileNotFoundError:
        return AppStatus(
            {}, False, "none", f"never ran here (no status file {path})", str(path), None
        )
    except (OSError, ValueError) as exc:
        return AppStatus(
            {}, False, "none", f"status file {path} unreadable: {exc}", str(path), None
        )
    url = last.get("status_url")
    if url:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:
                live = dict(json.load(resp))
        except (OSError, ValueError) as exc:
            note = f"not running: its status endpoint {url} does not answer ({_short(exc)})"
            return AppStatus(last, False, "file", note, str(path), url)
        running = live.get("state") not in FINAL_STATES
        note = "running" if running else f"stopping ({live.get('state')})"
        return AppStatus(live, running, "endpoint", note, str(path), url)
    if last.get("state") in FINAL_STATES:
        return AppStatus(last, False, "file", f"not running ({last['state']})", str(path), None)
    pid = last.get("pid")
    if isinstance(pid, int) and _alive(pid):
        return AppStatus(last, True, "file", f"running (pid {pid}, no endpoint)", str(path), None)
    return AppStatus(last, False, "file", f"not running: pid {pid} is gone", str(path), None)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def _short(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason or exc)
