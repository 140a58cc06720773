"""A rich progress bar per restoring changelog partition, for the CLI and the demo."""

from __future__ import annotations

import threading

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from statekeeper.changelog.listeners import BaseRestoreListener


class RichRestoreProgress(BaseRestoreListener):
    """Shows records restored against the partition's end offset; use as a context manager."""

    def __init__(self, console: Console | None = None) -> None:
        self._progress = Progress(
            TextColumn("[bold]restore[/] {task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console or Console(stderr=True),
            transient=False,
        )
        self._tasks: dict[tuple[str, int, str], TaskID] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> RichRestoreProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def on_restore_start(self, partition, store, start_offset, end_offset) -> None:  # type: ignore[no-untyped-def]
        with self._lock:
            self._tasks[(*partition, store)] = self._progress.add_task(
                f"{store} {partition[0]}[{partition[1]}]", total=max(0, end_offset - start_offset)
            )

    def on_batch_restored(self, partition, store, batch_end_offset, num_restored) -> None:  # type: ignore[no-untyped-def]
        with self._lock:
            self._progress.advance(self._tasks[(*partition, store)], num_restored)

    def on_restore_end(self, partition, store, total_restored) -> None:  # type: ignore[no-untyped-def]
        with self._lock:
            task = self._tasks[(*partition, store)]
            self._progress.update(task, total=total_restored, completed=total_restored)
