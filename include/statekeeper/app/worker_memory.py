"""RocksDB's memory per worker process, as the tasks last reported it, for the status."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from statekeeper.settings import StatekeeperSettings
from statekeeper.worker.task_run import TaskRunResult

#: Worker processes kept (the most recently reported): gone workers age out.
MAX_WORKERS_REPORTED = 64


class WorkerMemory:
    """Per worker process (``<executor>/<pid>``), the bound and usage of RocksDB's shared
    cache and memtables (:mod:`statekeeper.stores.rocksdb_memory`) at its last task."""

    def __init__(self, settings: StatekeeperSettings) -> None:
        self._settings = settings
        self._workers: dict[str, dict[str, Any]] = {}

    def note(self, results: Iterable[TaskRunResult]) -> bool:
        """Take in the results' reports; whether any was new."""
        noted = False
        for result in results:
            if result.rocksdb_memory is None:
                continue
            where = f"{result.executor_id or 'driver'}/{result.worker_pid}"
            self._workers.pop(where, None)  # the newest last
            self._workers[where] = result.rocksdb_memory
            noted = True
        while len(self._workers) > MAX_WORKERS_REPORTED:
            del self._workers[next(iter(self._workers))]
        return noted

    def report(self) -> dict[str, Any]:
        """The status's ``rocksdb_memory``."""
        return {
            "block_cache_bytes_per_worker": self._settings.block_cache_bytes,
            "write_buffer_bytes_per_worker": self._settings.write_buffer_bytes,
            "workers": dict(sorted(self._workers.items())),
        }
