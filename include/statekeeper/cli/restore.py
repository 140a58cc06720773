"""``statekeeper restore``: rebuild a stopped app's stores from a snapshot plus the tail."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from statekeeper.cli.common import (
    EXIT_OK,
    app_options,
    emit,
    snapshot_storage,
    snapshot_target,
    subcommand,
)


def add_restore(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    restore = subcommand(
        commands,
        "restore",
        "restore a stopped app's stores (or a copy, --to DIR) from a snapshot plus the tail",
        _cmd_restore,
    )
    app_options(restore)
    restore.add_argument("--task", action="append", help="only this task (repeatable)")
    restore.add_argument("--store", action="append", help="only this store (repeatable)")
    restore.add_argument("--url", help="snapshot root URL (default: settings.snapshot_url)")
    restore.add_argument("--state-dir", help="state root (default: the spec's settings)")
    restore.add_argument(
        "--to",
        metavar="DIR",
        help="build a copy under this state root instead (read-only against the changelogs; "
        "the app may keep running)",
    )
    restore.add_argument(
        "--from-snapshot",
        default="latest",
        metavar="ID|latest|none",
        help="snapshot id, the newest verified one (latest, default) or none (full replay)",
    )


def _download_progress(enabled: bool) -> Any:
    """A context giving a rich progress callback per downloaded snapshot on a terminal, or
    None (no bar)."""
    import contextlib

    if not enabled:
        return contextlib.nullcontext(None)
    from rich.progress import DownloadColumn, Progress

    @contextlib.contextmanager
    def bars() -> Any:
        ids: dict[tuple[str, str], Any] = {}
        with Progress(*Progress.get_default_columns(), DownloadColumn(), transient=True) as bar:

            def update(task: str, store: str, done: int, total: int) -> None:
                if (task, store) not in ids:
                    ids[(task, store)] = bar.add_task(f"{task} {store}", total=total)
                bar.update(ids[(task, store)], completed=done, total=total)

            yield update

    return bars()


def _cmd_restore(args: argparse.Namespace) -> int:
    from statekeeper.ops.restore import NONE, restore_app

    settings, spec = snapshot_target(args, need_spec="restore")
    storage = None if args.from_snapshot == NONE else snapshot_storage(settings)
    with _download_progress(enabled=not args.json and sys.stderr.isatty()) as progress:
        reports = restore_app(
            settings,
            spec.build_topology(),
            storage,
            tasks=args.task,
            stores=args.store,
            from_snapshot=args.from_snapshot,
            progress=progress,
            to=Path(args.to) if args.to else None,
        )
    payload = {
        "application_id": settings.application_id,
        "state_dir": str(args.to or settings.state_dir),
        "stores": [r.as_dict() for r in reports],
        "records_replayed": sum(r.records_replayed for r in reports),
        "bytes_downloaded": sum(r.bytes_downloaded for r in reports),
    }
    where = args.to or settings.state_dir
    lines = [f"{settings.application_id}: restored {len(reports)} store(s) under {where}"]
    for r in reports:
        source = f"snapshot {r.snapshot_id}" if r.snapshot_id else r.source
        lines.append(
            f"  {r.task} {r.store}: {source}, {r.records_replayed} records replayed, "
            f"{r.bytes_downloaded} bytes downloaded, {r.seconds:.2f} s"
            + (f" ({r.note})" if r.note else "")
        )
        lines += [f"    fell back from {f['snapshot_id']}: {f['reason']}" for f in r.fallbacks]
    emit(args, payload, "\n".join(lines))
    return EXIT_OK
