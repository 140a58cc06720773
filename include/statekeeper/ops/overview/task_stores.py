"""An app's tasks and their stores: size on disk, entries, where the state came from.

Read from the task directories under ``<state_dir>/<app>/`` (``<task>/rocksdb/<store>``)
and the status document's ``tasks`` (restore reports, entry estimates, committed batch) and
``task_live`` (source lag), so no topology is built: in-memory stores, which have no files,
show up through the status document. Only lists directories and reads file sizes: no store
is opened, no lock tried, nothing written in a task directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statekeeper.state.task_id import TaskId


def task_rows(state_dir: Path, application_id: str, status: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per task (directory on disk or task in the status), in task order, each with
    its stores."""
    app_dir = Path(state_dir) / application_id
    on_disk = {p.name: p for p in _task_dirs(app_dir)}
    reported: dict[str, Any] = status.get("tasks") or {}
    live: dict[str, Any] = status.get("task_live") or {}
    rows = []
    for task in sorted(set(on_disk) | set(reported), key=_task_order):
        info = reported.get(task) or {}
        restores = {r.get("store"): r for r in info.get("restore") or [] if isinstance(r, dict)}
        entries = info.get("store_entries_approx") or {}
        store_dirs = _store_dirs(on_disk.get(task))
        stores = []
        for store in sorted(set(store_dirs) | set(restores) | set(entries)):
            path = store_dirs.get(store)
            restore = restores.get(store) or {}
            stores.append(
                {
                    "store": store,
                    "on_disk": path is not None,
                    "bytes_on_disk": _size(path) if path is not None else 0,
                    "approx_entries": entries.get(store),
                    "restore_source": restore.get("source"),
                    "restore": restore or None,
                }
            )
        rows.append(
            {
                "task": task,
                "source_lag": (live.get(task) or {}).get("source_lag"),
                "committed_batch_id": info.get("committed_batch_id"),
                "last_batch_id": info.get("last_batch_id"),
                "worker_pid": info.get("worker_pid"),
                "bytes_on_disk": sum(s["bytes_on_disk"] for s in stores),
                "stores": stores,
            }
        )
    return rows


def _task_dirs(app_dir: Path) -> list[Path]:
    if not app_dir.is_dir():
        return []
    return [p for p in app_dir.iterdir() if p.is_dir() and TaskId.try_parse(p.name) is not None]


def _task_order(task: str) -> tuple[int, ...]:
    tid = TaskId.try_parse(task)
    return (tid.subtopology, tid.partition) if tid is not None else (1 << 30,)


def _store_dirs(task_dir: Path | None) -> dict[str, Path]:
    root = task_dir / "rocksdb" if task_dir is not None else None
    if root is None or not root.is_dir():
        return {}
    return {p.name: p for p in root.iterdir() if p.is_dir()}


def _size(path: Path) -> int:
    total = 0
    for f in path.rglob("*"):
        try:
            if f.is_file():
                total += f.stat().st_size
        except FileNotFoundError:  # RocksDB removed it (compaction) while we walked
            continue
    return total
