"""Watching a shipped app on a cluster through its status document: what the cluster tests
and the cluster demo wait for and ask (placements, standbys caught up, a real drain, query
endpoints, which worker ran an executor) and a bounded point-query loop."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from spark_apps.app_process import AppProcess
from statekeeper.errors import StatekeeperError


def placement(status: dict[str, Any]) -> dict[str, Any]:
    """The status document's ``placement`` section (empty before the first batch)."""
    return status.get("placement") or {}


def tasks_of(status: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Placements (executor, standbys, epoch) of the tasks whose id starts with ``prefix``
    (``"1_"``: subtopology 1)."""
    tasks = placement(status).get("tasks") or {}
    return {t: p for t, p in sorted(tasks.items()) if t.startswith(prefix)}


def drained_as_last_seen(status: dict[str, Any]) -> bool:
    """Every source partition processed up to the end the status document last saw (it
    refreshes ends every few seconds: see :func:`wait_drained` for a real drain)."""
    parts = status.get("source_partitions") or []
    return bool(parts) and all(p["position"] >= p["end"] for p in parts)


def standbys_caught_up(status: dict[str, Any], prefix: str = "") -> bool:
    """Every task (id starting with ``prefix``) has running standby copies with no
    changelog record left to apply, and the input is drained."""
    tasks = tasks_of(status, prefix)
    lag = placement(status).get("standby_lag") or {}
    if not tasks or not drained_as_last_seen(status):
        return False
    for task, where in tasks.items():
        if not where.get("standbys"):
            return False
        copies = lag.get(task) or {}
        for executor in where["standbys"]:
            info = copies.get(executor) or {}
            values = list((info.get("lag") or {}).values())
            if info.get("state") != "running" or not values or any(v != 0 for v in values):
                return False
    return True


def wait_drained(proc: AppProcess, bootstrap: str, timeout_s: float = 240) -> dict[str, Any]:
    """Wait until the app has processed every source partition up to its end as the broker
    reports it, repartition topics included, with the ends unchanged between two looks
    (processing the input feeds the repartition topics)."""
    from statekeeper.kafka.adapter import consumer_config
    from statekeeper.kafka.offsets import log_end_offsets

    conf = consumer_config(bootstrap, group_id="statekeeper-drain-watch")
    deadline = time.monotonic() + timeout_s
    previous: dict[tuple[str, int], int] | None = None
    while time.monotonic() < deadline:
        status = proc.status() or {}
        tps = [(p["topic"], p["partition"]) for p in status.get("source_partitions") or []]
        if not tps:
            time.sleep(0.2)
            continue
        ends = log_end_offsets(conf, tps)
        status = proc.wait_for(
            lambda s, e=ends: all(_positions(s).get(tp, -1) >= end for tp, end in e.items()),
            max(1.0, deadline - time.monotonic()),
        )
        if ends == previous:
            return status
        previous = ends
    raise StatekeeperError(f"app not drained within {timeout_s:.0f}s")


def _positions(status: dict[str, Any]) -> dict[tuple[str, int], int]:
    return {
        (p["topic"], p["partition"]): p["position"] for p in status.get("source_partitions") or []
    }


def query_url(status: dict[str, Any], executor: str) -> str:
    """The query server of ``executor``, as its report gives it."""
    report = (placement(status).get("executor_reports") or {}).get(executor) or {}
    query = report.get("query") or {}
    if not query.get("port"):
        raise StatekeeperError(f"executor {executor} reports no query server: {report}")
    return f"http://{query.get('host') or '127.0.0.1'}:{query['port']}"


def worker_of(cluster: Any, executor: str) -> int:
    """The index of the standalone worker that ran ``executor`` of the newest app."""
    for worker in cluster.workers:
        if executor in executors_of_worker(worker):
            return int(worker.index)
    raise StatekeeperError(f"no worker's work directory holds executor {executor}")


def executors_of_worker(worker: Any) -> set[str]:
    """Spark's ids of the executors a standalone worker ran for the newest app on the
    cluster: the worker makes a folder ``<app id>/<executor id>`` in its work directory for
    each (executor ids restart at 0 with every app, so older apps' folders are left out)."""
    apps = [p for p in Path(worker.work_dir).glob("app-*") if p.is_dir()]
    if not apps:
        return set()
    newest = max(apps, key=lambda p: p.name)  # app-<yyyyMMddHHmmss>-<nnnn>: sorts by start
    return {p.name for p in newest.iterdir() if p.is_dir()}


class QueryLoop(threading.Thread):
    """Point gets of ``keys`` from one store at one query server, paced and bounded, until
    stopped; ``answers`` holds (time, HTTP status or -1 when unanswered, body)."""

    def __init__(
        self, url: str, store: str, keys: list[Any], pause_s: float = 0.01, most: int = 50_000
    ) -> None:
        from statekeeper.query.client import QueryClient

        super().__init__(daemon=True)
        self.client = QueryClient(url, timeout_s=5.0)
        self.store, self.keys, self.pause_s, self.most = store, keys, pause_s, most
        self.answers: list[tuple[float, int, dict[str, Any]]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop_event.is_set() and i < self.most:
            try:
                answer = self.client.get_answer(self.store, self.keys[i % len(self.keys)])
                self.answers.append((time.time(), answer.status, answer.body))
            except OSError as exc:  # kept: an unanswered query is a failure to the caller
                self.answers.append((time.time(), -1, {"error": repr(exc)}))
            i += 1
            time.sleep(self.pause_s)
