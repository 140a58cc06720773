"""The status's RocksDB memory per worker process: the newest report of each, a bounded set."""

from __future__ import annotations

from statekeeper.app.worker_memory import MAX_WORKERS_REPORTED, WorkerMemory
from statekeeper.settings import StatekeeperSettings
from statekeeper.worker.task_run import TaskRunResult


def _result(pid: int, usage: int | None) -> TaskRunResult:
    memory = None if usage is None else {"block_cache_usage_bytes": usage}
    return TaskRunResult(
        "0_0", 1, committed=True, worker_pid=pid, executor_id="1", rocksdb_memory=memory
    )


def test_keeps_the_newest_report_per_worker_and_ages_out_the_oldest() -> None:
    memory = WorkerMemory(StatekeeperSettings(block_cache_bytes=2**27, write_buffer_bytes=2**25))
    assert not memory.note([_result(7, None)])
    assert memory.note([_result(7, 10), _result(8, 20), _result(7, 30)])
    report = memory.report()
    assert report["block_cache_bytes_per_worker"] == 2**27
    assert report["write_buffer_bytes_per_worker"] == 2**25
    assert report["workers"] == {
        "1/7": {"block_cache_usage_bytes": 30},
        "1/8": {"block_cache_usage_bytes": 20},
    }
    memory.note([_result(100 + i, i) for i in range(MAX_WORKERS_REPORTED)])
    workers = memory.report()["workers"]
    assert len(workers) == MAX_WORKERS_REPORTED and "1/8" not in workers and "1/7" not in workers
