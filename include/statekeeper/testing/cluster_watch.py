"""Watching a shipped app on a cluster through its status document: what the cluster tests
and the cluster demo wait for and ask (placements, standbys caught up, a real drain, query
endpoints, which worker ran an executor) and a bounded point-query loop. For host freezes
(``LocalSparkCluster.freeze_worker``): whether a worker's Python workers are busy right now
(a batch runs there), whether the driver moved a lost executor's tasks, and when its log
said the executor was lost."""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from statekeeper.errors import StatekeeperError
from statekeeper.testing.app_process import AppProcess


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


def stateful_prefixes(topology: Any) -> list[str]:
    """Task id prefixes (``"1_"``) of the subtopologies that hold stores."""
    return [f"{sub.id}_" for sub in topology.subtopologies if topology.store_specs(sub.id)]


def active_on(status: dict[str, Any], executor: str, prefixes: list[str]) -> list[str]:
    """Tasks (ids starting with one of ``prefixes``) whose active copy ``executor`` runs."""
    tasks = placement(status).get("tasks") or {}
    return sorted(
        t
        for t, where in tasks.items()
        if where.get("executor") == executor and any(t.startswith(p) for p in prefixes)
    )


def moved_off(status: dict[str, Any], executor: str, prefixes: list[str]) -> bool:
    """The driver's latest assignment leaves ``executor`` out: it no longer lists it among
    the live executors and places none of the tasks (``prefixes``) there."""
    executors = placement(status).get("executors") or []
    return (
        bool(executors) and executor not in executors and not active_on(status, executor, prefixes)
    )


# -- a worker's Python workers, from /proc ------------------------------------------------------

#: What a pyspark daemon and the Python workers it forks run (a fork keeps the command line).
PYSPARK_DAEMON = "pyspark.daemon"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time ``pid`` has used (None when it is gone)."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def python_workers(cluster: Any, index: int) -> list[int]:
    """Python workers of worker ``index``'s executors: the processes a pyspark daemon forked
    (same command line as the daemon, whose parent is the executor JVM)."""
    found = []
    for pid in cluster.worker_processes(index):
        if PYSPARK_DAEMON not in _cmdline(pid):
            continue
        fields = _stat_fields(pid)
        if fields is not None and PYSPARK_DAEMON in _cmdline(int(fields[1])):
            found.append(pid)
    return found


def busy_python_workers(cluster: Any, index: int, window_s: float = 0.2) -> dict[int, float]:
    """CPU seconds each of worker ``index``'s Python workers used over ``window_s`` (those
    that used any): a Spark task that runs stream tasks there keeps one busy."""
    before = {pid: cpu_seconds(pid) for pid in python_workers(cluster, index)}
    time.sleep(window_s)
    used = {}
    for pid, start in before.items():
        now = cpu_seconds(pid)
        if start is not None and now is not None and now > start:
            used[pid] = round(now - start, 3)
    return used


def wait_python_busy(
    cluster: Any,
    index: int,
    min_cpu_s: float = 0.05,
    window_s: float = 0.1,
    timeout_s: float = 60.0,
) -> dict[int, float] | None:
    """Wait (at most ``timeout_s``) until one of worker ``index``'s Python workers used at
    least ``min_cpu_s`` of CPU within ``window_s`` — it is in the middle of a batch's work,
    not in a Spark task with nothing to run — and return the usage; None at the deadline."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        used = busy_python_workers(cluster, index, window_s)
        if used and max(used.values()) >= min_cpu_s:
            return used
    return None


def follow_after_thaw(
    pids: list[int], timeout_s: float = 10.0, every_s: float = 0.01
) -> dict[int, dict[str, float | None]]:
    """Call right after thawing: for each of ``pids`` (Python workers that were frozen), how
    much CPU it used from now on and how long it lived (``lived_s`` None: still alive at
    ``timeout_s``) — whether a zombie ran at all before its executor's end took it down."""
    start = time.monotonic()
    first = {pid: cpu_seconds(pid) for pid in pids}
    last = dict(first)
    gone: dict[int, float] = {}
    while time.monotonic() - start < timeout_s and len(gone) < len(pids):
        for pid in pids:
            if pid in gone:
                continue
            now = cpu_seconds(pid)
            fields = _stat_fields(pid)
            if now is None or fields is None or fields[0] in ("Z", "X"):
                gone[pid] = time.monotonic() - start
            else:
                last[pid] = now
        time.sleep(every_s)
    return {
        pid: {
            "cpu_after_thaw_s": (
                round(last[pid] - first[pid], 3)
                if first[pid] is not None and last[pid] is not None
                else None
            ),
            "lived_s": round(gone[pid], 2) if pid in gone else None,
        }
        for pid in pids
    }


#: Driver log lines (Spark's) saying an executor is lost, for executor ``{0}``.
EXECUTOR_LOST_PATTERNS = (
    r"Removing executor {0} with no recent heartbeats",
    r"Lost executor {0} ",
    r"Executor app-[0-9-]+/{0} removed",
)


def executor_lost_lines(log: Path, executor: str, offset: int = 0) -> list[str]:
    """Lines of the driver's log from byte ``offset`` on that say ``executor`` is lost
    (heartbeat timeout, scheduler, standalone master)."""
    patterns = [re.compile(p.format(re.escape(executor))) for p in EXECUTOR_LOST_PATTERNS]
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if any(p.search(line) for p in patterns)]


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
