"""``make demo``, cluster scene: word_count on a two-worker Spark standalone cluster.

An embedded broker and a :class:`~statekeeper.cluster.local_cluster.LocalSparkCluster` of two
workers (one core each) on 127.0.0.1 → word_count with one standby replica per task and a
query server on each executor → the tasks, their standbys, epochs and standby lag → point
queries at each executor (active or standby copy, lag, where a key lives) → ``kill -9`` of
the worker running most counting tasks → the tasks resume on the survivor from their
standby copies (epochs raised, only the changelog tail replayed) while the survivor keeps
answering queries → more input, a graceful stop, and the store rebuilt from the changelog
compared with a recomputation from the input topic. Everything started here is stopped at
the end, whatever happens.

    python -m spark_apps.word_count.cluster_demo [--lines 20000 --seed 5]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from statekeeper.app.spec import AppSpec, load_app_spec
from statekeeper.errors import StatekeeperError
from statekeeper.generate.command import positive_int
from statekeeper.kafka.embedded import EmbeddedBroker
from statekeeper.testing.app_process import AppProcess, spark_app_spec
from statekeeper.testing.cluster_watch import (
    QueryLoop,
    drained_as_last_seen,
    placement,
    query_url,
    standbys_caught_up,
    tasks_of,
    wait_drained,
    worker_of,
)

console = Console(width=max(Console().width, 110))
PARTITIONS = 2
STORE = "word-counts"
COUNTING = "1_"  # the counting tasks (subtopology 1) hold the store
TAIL_LINES = 400  # produced just before the kill: what the survivor's standbys must catch up
MORE_LINES = 3_000  # produced after the failover
WORDS_ASKED = 4


# -- the status document ---------------------------------------------------------------------


def _counting(status: dict[str, Any]) -> dict[str, Any]:
    """Placements of the tasks holding the word counts."""
    return tasks_of(status, COUNTING)


# -- tables ----------------------------------------------------------------------------------


def _lag_text(info: dict[str, Any] | None) -> str:
    if not info:
        return "-"
    lags = info.get("lag") or {}
    total = sum(int(v) for v in lags.values()) if lags else None
    return f"{info.get('state', '?')}, lag {'?' if total is None else total}"


def _tasks_table(
    title: str,
    status: dict[str, Any],
    workers: dict[str, int],
    before: dict[str, Any] | None = None,
) -> Table:
    table = Table(title=title)
    for col in ("task", "executor (worker)", "standby executor", "epoch", "standby copy"):
        table.add_column(col)
    lag = placement(status).get("standby_lag") or {}
    for task, where in _counting(status).items():
        executor = where["executor"]
        standbys = where.get("standbys") or []
        epoch = str(where["epoch"])
        old = (before or {}).get(task)
        if old is not None and old["epoch"] != where["epoch"]:
            epoch = f"{old['epoch']} → [bold]{where['epoch']}[/]"
        if old is not None and old["executor"] != executor:
            executor_text = (
                f"{old['executor']} → [bold]{executor}[/] (worker {workers.get(executor, '?')})"
            )
        else:
            executor_text = f"{executor} (worker {workers.get(executor, '?')})"
        table.add_row(
            task,
            executor_text,
            ", ".join(standbys) or "-",
            epoch,
            "; ".join(_lag_text((lag.get(task) or {}).get(s)) for s in standbys) or "-",
        )
    return table


# -- the app ---------------------------------------------------------------------------------


def _retargeted_spec(work: Path, suffix: str) -> tuple[Path, AppSpec]:
    """The shipped word_count spec on unique topics and application id, written to ``work``."""
    base = load_app_spec(spark_app_spec("word_count"))
    raw = base.model_dump()
    raw["application_id"] = f"{base.application_id}-{suffix}"
    raw["params"] = {
        **raw["params"],
        "input_topic": f"lines-{suffix}",
        "output_topic": f"word-counts-{suffix}",
    }
    path = work / "word_count.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path, load_app_spec(path)


class _Scene:
    """The demo's steps over one broker, one cluster and one app process."""

    def __init__(self, bootstrap: str, cluster: Any, work: Path, lines: int, seed: int) -> None:
        from .generator import word_count_lines

        self.bootstrap = bootstrap
        self.cluster = cluster
        self.work = work
        self.problems: list[str] = []
        suffix = uuid.uuid4().hex[:6]
        self.spec_path, self.spec = _retargeted_spec(work, suffix)
        self.topic = self.spec.params["input_topic"]
        self.overrides: dict[str, Any] = {
            "bootstrap_servers": bootstrap,
            "spark_master": cluster.master_url,
            "num_standby_replicas": 1,
            "query_port": 0,
            "status_file": str(work / "status.json"),
            "status_port": None,
            "state_dir": str(work / "state"),
            "checkpoint_dir": str(work / "checkpoints"),
            "commit_interval_ms": 500,
            "max_records_per_batch": 20_000,  # 20k lines feed ~190k repartitioned words
            "trigger_interval_ms": 200,
            "lock_timeout_s": 60,
        }
        all_lines = list(word_count_lines(lines + TAIL_LINES + MORE_LINES, seed=seed))
        self.base = all_lines[:lines]
        self.tail = all_lines[lines : lines + TAIL_LINES]
        self.more = all_lines[lines + TAIL_LINES :]
        self.proc = AppProcess(
            self.spec_path, self.overrides, work / "app.log", stop_when_idle=False
        )
        self.workers: dict[str, int] = {}  # executor id -> worker index
        self.urls: dict[str, str] = {}  # executor id -> its query server

    def produce(self, records: list[Any]) -> None:
        from statekeeper.generate.producer import produce

        produce(self.bootstrap, self.topic, records, partitions=PARTITIONS)

    def expected(self) -> dict[str, int]:
        from statekeeper.kafka.topic_reader import read_topic

        from . import reference

        return reference.recompute(read_topic(self.bootstrap, self.topic)).counts

    def note_workers(self, status: dict[str, Any]) -> None:
        for executor in placement(status).get("executors") or []:
            if executor not in self.workers:
                self.workers[executor] = worker_of(self.cluster, executor)

    # -- 2 + 3: run, standbys ----------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        self.produce(self.base)
        console.print(
            f"produced {len(self.base):,} lines to {self.topic!r} ({PARTITIONS} partitions); "
            f"starting word_count on {self.cluster.master_url} with num_standby_replicas=1 "
            "(the first batch takes a few seconds)"
        )
        started = time.monotonic()
        self.proc.start()
        wait_drained(self.proc, self.bootstrap)
        status = self.proc.wait_for(lambda s: standbys_caught_up(s, COUNTING), 180)
        self.note_workers(status)
        console.print(
            f"drained {len(self.base):,} lines and standbys caught up in "
            f"{time.monotonic() - started:.1f} s; executors: "
            + ", ".join(f"{e} on worker {w}" for e, w in sorted(self.workers.items()))
        )
        console.print(
            _tasks_table("counting tasks: active and standby copies", status, self.workers)
        )
        return status

    # -- 4: queries --------------------------------------------------------------------------

    def query_each_executor(self, status: dict[str, Any], words: list[str], title: str) -> None:
        """Ask every executor for ``words``; an active copy must give the recomputed count,
        a standby copy too unless it reports a lag."""
        from statekeeper.query.client import QueryClient

        expected = self.expected()
        table = Table(title=title)
        for col in ("asked", "word", "task", "value", "expected", "source", "lag", "answered by"):
            table.add_column(col)
        for executor in sorted(self.workers):
            if executor not in (placement(status).get("executors") or []):
                self._ask_gone(table, executor, words[0])
                continue
            url = self.urls.setdefault(executor, query_url(status, executor))
            client = QueryClient(url)
            try:
                for word in words:
                    body, by = self._settled_get(client, word, expected[word])
                    ok = body.get("value") == expected[word]
                    behind = body.get("source") == "standby" and body.get("lag")
                    if not ok and not behind:
                        self.problems.append(
                            f"{executor} answered {word!r} = {body.get('value')} from its "
                            f"{body.get('source')} copy with lag {body.get('lag')}; "
                            f"the recomputation says {expected[word]}"
                        )
                    table.add_row(
                        f"{executor} {url}",
                        word,
                        str(body.get("task")),
                        f"{'[green]' if ok else '[red]'}{body.get('value')}[/]",
                        str(expected[word]),
                        str(body.get("source")),
                        str(body.get("lag")),
                        "this executor" if by == url else f"[yellow]{by}[/]",
                    )
            finally:
                client.close()
        console.print(table)

    def _ask_gone(self, table: Table, executor: str, word: str) -> None:
        """A row for an executor lost with its worker: its query server must not answer."""
        from statekeeper.query.client import QueryClient

        url = self.urls[executor]
        client = QueryClient(url, timeout_s=2.0)
        try:
            answer = client.get_answer(STORE, word)
        except OSError as exc:
            table.add_row(
                f"{executor} {url}",
                word,
                "",
                "",
                "",
                "",
                "",
                f"[red]{type(exc).__name__}[/] (worker killed)",
            )
            return
        finally:
            client.close()
        self.problems.append(f"executor {executor} answered after its worker was killed: {answer}")

    def _settled_get(
        self, client: Any, word: str, want: int, timeout_s: float = 10.0
    ) -> tuple[dict[str, Any], str]:
        """The answer once it shows ``want`` (the last commit may be a moment behind the
        drained input), else the last answer; fails on an error status."""
        deadline = time.monotonic() + timeout_s
        while True:
            answer = client.get_answer(STORE, word)
            if answer.status != 200:
                raise StatekeeperError(
                    f"query of {word!r} at {client.base_url}: HTTP {answer.status} {answer.body}"
                )
            if answer.body.get("value") == want or time.monotonic() > deadline:
                return answer.body, answer.url
            time.sleep(0.2)

    def show_routing(self, status: dict[str, Any], word: str) -> None:
        """Where a key lives (metadata), and a read that insists on the active copy being
        sent on from the standby host to the active host the metadata names."""
        from statekeeper.query.client import QueryClient

        tasks = _counting(status)
        meta_any = QueryClient(query_url(status, next(iter(self.workers)))).metadata(STORE, word)
        task = meta_any["task"]
        standby = tasks[task]["standbys"][0]
        client = QueryClient(query_url(status, standby))
        try:
            meta = client.metadata(STORE, word)
            active = meta.get("active") or {}
            console.print(
                f"/metadata/{STORE}?key={word} → partition {meta.get('partition')}, task "
                f"{task}, active {active.get('executor', '?')} at {active.get('query_url')}, "
                "standbys "
                + ", ".join(
                    f"{s.get('executor')} at {s.get('query_url')}"
                    for s in meta.get("standbys") or []
                )
            )
            path = f"/stores/{STORE}/get"
            first = client.request(path, {"key": word, "fresh": "true"})
            console.print(
                f"get {word!r} with fresh=true at standby host {standby}: HTTP {first.status} "
                f"({first.body.get('error', '')})"
            )
            target = ((first.body.get("metadata") or {}).get("active") or {}).get("query_url")
            if first.status not in (421, 503) or not target:
                self.problems.append(
                    f"fresh=true at the standby host answered HTTP {first.status} without "
                    f"naming the active host: {first.body}"
                )
                return
            second = client.request(path, {"key": word, "fresh": "true"}, base_url=target)
            console.print(
                f"  → sent on to the active host {target}: HTTP {second.status}, value "
                f"{second.body.get('value')}, source {second.body.get('source')}"
            )
            if second.status != 200 or second.body.get("source") != "active":
                self.problems.append(f"the active host answered {second.status}: {second.body}")
        finally:
            client.close()

    # -- 5: failover -------------------------------------------------------------------------

    def failover(self, status: dict[str, Any], words: list[str]) -> dict[str, Any]:
        from statekeeper.query.client import QueryClient

        tasks = _counting(status)
        actives = [p["executor"] for p in tasks.values()]
        victim = max(sorted(set(actives)), key=actives.count)
        moving = sorted(t for t, p in tasks.items() if p["executor"] == victim)
        survivor = next(s for p in tasks.values() for s in p["standbys"] if s != victim)
        worker = self.workers[victim]
        url = query_url(status, survivor)
        probe = QueryClient(url)
        keys = [w for w in sorted(self.expected()) if probe.metadata(STORE, w)["task"] in moving]
        probe.close()
        keys = keys[:50]
        if not keys:
            raise StatekeeperError(f"no word of the moving tasks {moving}")
        querier = QueryLoop(url, STORE, keys, pause_s=0.02)
        querier.start()
        try:
            time.sleep(1.0)
            self.produce(self.tail)
            time.sleep(0.5)
            console.print(
                f"produced {len(self.tail)} more lines; [red]kill -9[/] of worker {worker} "
                f"(executor {victim}: active of {', '.join(moving)}) — its worker JVM, "
                "executor JVM and Python workers; the survivor is executor "
                f"{survivor}, asked {len(keys)} words of the moving tasks meanwhile"
            )
            killed_at = time.time()
            pids = self.cluster.kill_worker(worker)
            console.print(f"  {len(pids)} processes killed")
            moved = self.proc.wait_for(
                lambda s: (
                    drained_as_last_seen(s)
                    and all((_counting(s).get(t) or {}).get("executor") == survivor for t in moving)
                ),
                120,
            )
            console.print(
                f"tasks {', '.join(moving)} resumed on executor {survivor} "
                f"{time.time() - killed_at:.1f} s after the kill"
            )
            after = wait_drained(self.proc, self.bootstrap)
            time.sleep(1.0)
        finally:
            querier.stop_event.set()
            querier.join(30)
        after = self.proc.status() or after or moved
        console.print(_tasks_table("counting tasks after the kill", after, self.workers, tasks))
        moves = placement(after).get("moves_by_reason") or {}
        restores = placement(after).get("restores") or []
        console.print(
            "moves by reason (every task, splitting ones included): "
            + ", ".join(f"{r}: {n}" for r, n in sorted(moves.items()))
            + "; restores by cause: "
            + ", ".join(f"{r['cause']} from {r['source']}: {r['count']}" for r in restores)
        )
        if moves.get("to standby", 0) < len(moving):
            self.problems.append(f"{len(moving)} tasks moved but moves_by_reason is {moves}")
        for task in moving:
            if _counting(after)[task]["epoch"] <= tasks[task]["epoch"]:
                self.problems.append(f"task {task} moved but its epoch was not raised")
        self._restores(after, moving)
        self._failover_queries(querier.answers, killed_at, survivor)
        return after

    def _restores(self, status: dict[str, Any], moving: list[str]) -> None:
        table = Table(title="how the moved tasks got their state on the survivor")
        for col in ("task", "store", "source", "records replayed", "seconds"):
            table.add_column(col)
        bound = 2 * sum(len((r.value or b"").split()) + 1 for r in self.tail)
        for task in moving:
            restores = ((status.get("tasks") or {}).get(task) or {}).get("restore") or []
            for r in restores:
                table.add_row(
                    task,
                    str(r.get("store")),
                    str(r.get("source")),
                    f"{r.get('records') or 0:,}",
                    f"{r.get('seconds') or 0:.3f}",
                )
            counts = [r for r in restores if r.get("store") == STORE]
            if not counts or counts[0].get("source") != "local state":
                self.problems.append(f"task {task} did not resume from local state: {restores}")
            elif (counts[0].get("records") or 0) > bound:
                self.problems.append(
                    f"task {task} replayed {counts[0].get('records')} records, more than the "
                    f"tail's bound {bound}"
                )
        console.print(table)

    def _failover_queries(
        self, answers: list[tuple[float, int, dict[str, Any]]], killed_at: float, survivor: str
    ) -> None:
        table = Table(title=f"queries at the survivor {survivor} around the kill")
        for col in (
            "when",
            "answers",
            "by the standby copy (lags)",
            "by the active copy",
            "failed",
        ):
            table.add_column(col)
        for label, chosen in (
            ("before the kill", [a for a in answers if a[0] < killed_at]),
            ("after the kill", [a for a in answers if a[0] >= killed_at]),
        ):
            standby = [b for _, s, b in chosen if s == 200 and b.get("source") == "standby"]
            active = [b for _, s, b in chosen if s == 200 and b.get("source") == "active"]
            failed = [(s, b) for _, s, b in chosen if s != 200]
            lags = Counter(b.get("lag") for b in standby)
            lag_text = ", ".join(f"lag {k}: {n}" for k, n in sorted(lags.items(), key=str))
            table.add_row(
                label,
                f"{len(chosen):,}",
                f"{len(standby):,} ({lag_text or '-'})",
                f"{len(active):,}",
                f"{'[red]' if failed else ''}{len(failed)}",
            )
            if failed:
                self.problems.append(f"{len(failed)} queries {label} failed, e.g. {failed[0]}")
        console.print(table)
        if not any(a[0] >= killed_at and a[1] == 200 for a in answers):
            self.problems.append("the survivor answered no query after the kill")

    # -- 6: the end --------------------------------------------------------------------------

    def finish(self) -> None:
        from statekeeper.app.store_reader import read_store

        self.produce(self.more)
        final = wait_drained(self.proc, self.bootstrap)
        processed = (final.get("totals") or {}).get("records_processed", 0)
        console.print(
            f"produced {len(self.more):,} more lines; drained on the survivor "
            f"({processed:,} records processed by this run); stopping word_count (SIGTERM)"
        )
        self.proc.terminate()
        code = self.proc.wait(120)
        if code != 0:
            self.problems.append(f"word_count exited with {code}; see {self.proc.log_path}")
            return
        console.rule("check: the store rebuilt from its changelog vs a recomputation")
        console.print("rebuilding every task's stores from the changelog in a fresh directory:")
        settings = self.spec.resolved_settings(**self.overrides).model_copy(
            update={"state_dir": self.work / "rebuilt", "restore_from_snapshots": False}
        )
        rebuilt = read_store(settings, self.spec.build_topology(), STORE, PARTITIONS)
        expected = self.expected()
        if rebuilt == expected:
            console.print(
                f"  [green]✓[/] {STORE}: {len(rebuilt):,} words, {sum(rebuilt.values()):,} "
                "occurrences, equal to the recomputation from the input topic"
            )
        else:
            wrong = sorted(
                w for w in set(rebuilt) | set(expected) if rebuilt.get(w) != expected.get(w)
            )
            self.problems.append(
                f"{STORE}: {len(wrong)} words differ from the recomputation, e.g. "
                + ", ".join(f"{w}: {rebuilt.get(w)} vs {expected.get(w)}" for w in wrong[:5])
            )


def _words_to_ask(expected: dict[str, int], status: dict[str, Any], url: str) -> list[str]:
    """A few frequent words, from both counting tasks."""
    from statekeeper.query.client import QueryClient

    client = QueryClient(url)
    by_task: dict[str, list[str]] = {}
    try:
        for word in sorted(expected, key=lambda w: (-expected[w], w))[:40]:
            by_task.setdefault(client.metadata(STORE, word)["task"], []).append(word)
    finally:
        client.close()
    words: list[str] = []
    for i in range(WORDS_ASKED):
        for task in sorted(by_task):
            if i < len(by_task[task]) and len(words) < WORDS_ASKED:
                words.append(by_task[task][i])
    return words


def _stopped(step: str, action: Callable[[], Any]) -> None:
    """Run a cleanup step; report (never raise) its failure so the next one still runs."""
    try:
        action()
    except Exception as exc:  # noqa: BLE001 - cleanup goes on; the failure is shown
        console.print(f"[red]{step} failed: {exc}[/]")


def run(lines: int = 20_000, seed: int = 5) -> int:
    """Run the scene; 0 if every check passed, else 1."""
    from statekeeper.cluster.local_cluster import ClusterConfig, LocalSparkCluster

    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="statekeeper-cluster-demo-"))
    console.rule("statekeeper demo: word_count on a two-worker Spark cluster, standbys, kill -9")
    problems: list[str] = []
    cluster = LocalSparkCluster(
        ClusterConfig(
            base_dir=work / "cluster", workers=2, cores_per_worker=1, memory_per_worker="1g"
        )
    )
    scene: _Scene | None = None
    try:
        with EmbeddedBroker() as broker:
            try:
                up = time.monotonic()
                cluster.start()
                console.print(
                    f"embedded broker on {broker.bootstrap_servers}; Spark master "
                    f"{cluster.master_url} (web UI {cluster.master_webui_url}) with "
                    f"{len(cluster.workers)} workers of 1 core and 1g each, up in "
                    f"{time.monotonic() - up:.1f} s"
                )
                scene = _Scene(broker.bootstrap_servers, cluster, work, lines, seed)
                status = scene.start()
                expected = scene.expected()
                words = _words_to_ask(
                    expected, status, query_url(status, next(iter(scene.workers)))
                )
                scene.query_each_executor(
                    status, words, "point queries at each executor's query server"
                )
                scene.show_routing(status, words[0])
                console.rule("kill -9 of the worker running most counting tasks")
                after = scene.failover(status, words)
                scene.query_each_executor(after, words, "the same queries after the failover")
                console.rule("more input, then a graceful stop")
                scene.finish()
                problems = scene.problems
            except Exception as exc:  # noqa: BLE001 - reported as a failed check, exit 1
                problems = [*(scene.problems if scene else []), f"{type(exc).__name__}: {exc}"]
            finally:
                if scene is not None:
                    _stopped("stopping word_count", scene.proc.kill9)
                _stopped("stopping the Spark cluster", cluster.stop)
    finally:
        if problems:
            console.print(f"work directory kept for its logs: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    for problem in problems:
        console.print(f"  [red]✗[/] {problem}")
    if problems:
        return 1
    console.print(
        f"[bold green]a worker lost to kill -9: its tasks resumed on the survivor from their "
        f"standby copies, queries kept being answered, and the store is exact[/] "
        f"({time.monotonic() - started:.0f} s)"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of the scene; the exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m spark_apps.word_count.cluster_demo",
        description="word_count on a two-worker Spark standalone cluster: standbys, queries, "
        "kill -9 of a worker, exact state",
    )
    parser.add_argument("--lines", type=positive_int, default=20_000)
    parser.add_argument("--seed", type=int, default=5)
    args = parser.parse_args(argv)
    return run(args.lines, args.seed)


if __name__ == "__main__":
    raise SystemExit(main())
