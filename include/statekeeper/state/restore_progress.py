"""Restore progress of the task a worker process is opening, written to the task directory.

Tasks restore on Spark executors; the driver's status endpoint reads these small files
(``<state_dir>/<app>/<task>/.restore-progress.json``) to show live progress.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from statekeeper.atomic_file import replace_text
from statekeeper.changelog.listeners import BaseRestoreListener

PROGRESS_FILE = ".restore-progress.json"


class RestoreProgressFile(BaseRestoreListener):
    """A restore listener that mirrors progress into the current task's directory.

    A Spark Python worker runs one task at a time, so one instance per process is enough;
    the runner points it at the task it is about to open.
    """

    def __init__(self, min_interval_s: float = 0.5) -> None:
        self.task_dir: Path | None = None
        self._stores: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._min_interval_s = min_interval_s
        self._last_write = 0.0

    def begin(self, task_dir: Path) -> None:
        self.task_dir, self._stores = task_dir, {}

    def on_restore_start(self, partition, store, start_offset, end_offset) -> None:  # type: ignore[no-untyped-def]
        with self._lock:
            self._stores[store] = {
                "start_offset": start_offset,
                "end_offset": end_offset,
                "restored": 0,
                "done": False,
            }
        self._write(force=True)

    def on_batch_restored(self, partition, store, batch_end_offset, num_restored) -> None:  # type: ignore[no-untyped-def]
        with self._lock:
            entry = self._stores.setdefault(store, {"restored": 0, "done": False})
            entry["restored"] = entry.get("restored", 0) + num_restored
            entry["position"] = batch_end_offset
        self._write()

    def on_restore_end(self, partition, store, total_restored) -> None:  # type: ignore[no-untyped-def]
        with self._lock:
            entry = self._stores.setdefault(store, {})
            entry.update(restored=total_restored, done=True)
        self._write(force=True)

    def on_restore_reason(self, partition, store, reason) -> None:  # type: ignore[no-untyped-def]
        with self._lock:
            self._stores.setdefault(store, {})["reason"] = reason

    def note_source(self, store: str, report: dict[str, Any]) -> None:
        """After the open: where ``store`` got its state (``source``: snapshot with its id and
        the tail replayed, full replay, in-memory changelog or local state)."""
        keys = ("source", "snapshot_id", "records", "snapshot_fallbacks", "snapshot_note")
        with self._lock:
            entry = self._stores.setdefault(store, {})
            entry.update({k: report[k] for k in keys if report.get(k) is not None})
        self._write(force=True)

    def _write(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.task_dir is None or (not force and now - self._last_write < self._min_interval_s):
            return
        self._last_write = now
        with self._lock:
            doc = {"updated_at": time.time(), "stores": json.loads(json.dumps(self._stores))}
        replace_text(self.task_dir / PROGRESS_FILE, json.dumps(doc))


def read_restore_progress(task_dir: Path) -> dict[str, Any] | None:
    """The last progress a worker wrote for ``task_dir``, or None."""
    try:
        return json.loads((task_dir / PROGRESS_FILE).read_text())
    except (OSError, ValueError):
        return None
