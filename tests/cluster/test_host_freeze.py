"""The shipped apps on a two-worker Spark standalone cluster, one worker's host frozen.

A host that pauses (a VM suspended, a long stall, a partition that heals) is worse than one
that dies: its processes come back believing they still own their tasks. Each fault here
freezes a whole worker "host" with SIGSTOP (``LocalSparkCluster.freeze_worker``: the
Worker JVM, the app's executor JVM, its pyspark daemon and Python workers) while its
executor works through a batch of the stateful (counting) tasks. More input goes in; the
driver gives the executor up after Spark's heartbeat timeout
(``statekeeper.spark.session_env.CLUSTER_FAILOVER_CONF``) and moves its tasks to the
surviving executor, which commits later batches and works through all the input fed so
far. Then the host is thawed (SIGCONT): its
Python worker resumes in the middle of the batch it was running, with its stale view of
the task (the zombie), until its Worker kills its executor (the master and the driver
dropped it) and a new executor starts there. The app runs on, is drained and stopped.

The damage a zombie does must not be repaired by chance: a stale count it writes would be
overwritten by the next batch that counts the same word, and most words are in every batch.
So word_count's input is fed in slices whose words carry the slice number (``appleq7``,
:func:`_phase_words`): a slice's counts are final once the slice is processed. In
patient_monitoring the windows move on with event time by themselves (4,000-event batches
hold ~2.2 minutes of events; a batch and the next share each patient's open window).

``STATEKEEPER_CLUSTER_FREEZES`` faults per app (1 in ``make test``; ``make test-chaos``
runs at least 5, patient_monitoring only there). At the end, for every store:

* rebuilt from its changelog in a fresh directory, it equals the independent
  recomputation (``reference.recompute``) of the input topic: the zombie's late changelog
  records and commit markers must not count;
* every executor's local copy of it — active copies and (word_count runs with
  ``num_standby_replicas=1``) standby copies — opened read-only, equals it too: no copy
  applied the zombie's records;
* the deduplicated outputs' latest values and the DLQ equal the recomputation's.

The app runs with :data:`~statekeeper.spark.session_env.CLUSTER_FAILOVER_CONF` in its spec
(a frozen executor is given up after ~20 s instead of 2-3 minutes); the cluster with
``spark.worker.timeout`` 20 s. Timings are printed, never asserted.

The app's status must also report fenced records (:func:`fenced_total`) whenever the
changelogs hold records a thawed zombie wrote (:func:`stale_epoch_writes`)
(``STATEKEEPER_EXPECT_FENCING=0`` turns that check off, to run the series against code
without fencing).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import random
import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from spark_apps.patient_monitoring import reference as pm_ref
from spark_apps.patient_monitoring.generator import patient_events
from spark_apps.word_count import reference as wc_ref
from spark_apps.word_count.generator import word_count_lines
from statekeeper.app.spec import load_app_spec
from statekeeper.app.store_reader import read_store
from statekeeper.changelog.records import MARKER_KEY, changelog_topic
from statekeeper.generate.producer import produce
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.processing.dlq import dlq_topic
from statekeeper.processing.output_reader import read_deduped as deduped
from statekeeper.processing.output_reader import source_positions as sources_of
from statekeeper.spark.session_env import CLUSTER_FAILOVER_CONF
from statekeeper.state.environment import StateEnvironment
from statekeeper.stores.typed import WindowStore
from statekeeper.testing.cluster_watch import (
    active_on,
    executor_lost_lines,
    executors_of_worker,
    follow_after_thaw,
    moved_off,
    python_workers,
    stateful_prefixes,
    wait_drained,
    wait_python_busy,
)
from tests.e2e.harness import AppUnderTest

FREEZES = int(os.environ.get("STATEKEEPER_CLUSTER_FREEZES", "1"))
#: The app reports what fencing stopped in its status (``status["fencing"]``).
EXPECT_FENCING = os.environ.get("STATEKEEPER_EXPECT_FENCING", "1") == "1"
#: From this many freezes a run must show zombie writes (``make test-chaos`` runs 5).
SERIES = 5
PARTITIONS = 4
#: What word_count counts as word characters, upper case included (it lower-cases first).
TAGGABLE = re.compile(r"[A-Za-z0-9']+")

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.xdist_group("spark_cluster"),
    pytest.mark.timeout(420 + 180 * FREEZES),
]


def fenced_total(status: dict[str, Any], kind: str | None = None) -> int:
    """Records fenced as written by a superseded epoch, as the app's status document counts
    them: all kinds (changelog records and markers, standby changelog records, repartition
    records), or the one ``kind`` names."""
    fencing = status.get("fencing", {}) or {}
    if kind is None:
        return int(fencing.get("fenced_total", 0))
    return int((fencing.get("by_kind") or {}).get(kind, 0))


def stale_epoch_writes(bootstrap: str, topic: str) -> int:
    """Records of ``topic`` written after a newer epoch had begun in their partition: what a
    thawed zombie wrote. Read straight from the headers (``sk.epoch`` / ``sk.marker`` /
    ``sk.begin``, docs/fencing.md), without the runtime's fencing code."""
    stale = 0
    records = read_topic(bootstrap, topic)
    for partition in records.values():
        newest = 0
        for record in partition:
            epochs = [
                int(raw)
                for name, raw in (record.headers or [])
                if name in ("sk.epoch", "sk.marker", "sk.begin")
            ]
            if not epochs:
                continue
            if 0 < epochs[0] < newest:
                stale += 1
            newest = max(newest, epochs[0])
    return stale


def stale_repartition_writes(bootstrap: str, app_id: str) -> int:
    """Repartition records written by an upstream task under an epoch older than one that
    task had already written in the same partition: what a thawed zombie of an upstream task
    wrote. From the headers (``sk.task``, ``sk.epoch``), without the runtime's code."""
    from statekeeper.kafka.admin import make_admin

    topics = [
        t
        for t in make_admin(bootstrap).list_topics(timeout=10).topics
        if t.startswith(f"{app_id}-") and t.endswith("-repartition")
    ]
    stale = 0
    for topic in topics:
        for partition in read_topic(bootstrap, topic).values():
            newest: dict[bytes, int] = {}
            for record in partition:
                headers = dict(record.headers or [])
                task, epoch = headers.get("sk.task"), int(headers.get("sk.epoch") or 0)
                if task is None or epoch == 0:
                    continue
                if epoch < newest.get(task, 0):
                    stale += 1
                newest[task] = max(newest.get(task, 0), epoch)
    return stale


def marker_regressions(bootstrap: str, topic: str) -> dict[int, list[dict[str, Any]]]:
    """Per changelog partition, the commit markers whose batch id is below one written
    before them: a writer committed a batch after another had committed later ones (what a
    thawed zombie does). Evidence printed beside the checks, not a check itself (fencing
    makes such a marker harmless, not absent)."""
    found: dict[int, list[dict[str, Any]]] = {}
    newest: dict[int, int] = {}
    records = read_topic(bootstrap, topic)
    for record in (r for partition in sorted(records) for r in records[partition]):
        if not (record.key or b"").startswith(MARKER_KEY):
            continue
        marker = json.loads(record.value or b"{}")
        batch = int(marker.get("batch_id", -1))
        if batch < newest.get(record.partition, -1):
            found.setdefault(record.partition, []).append(
                {
                    "offset": record.offset,
                    "batch_id": batch,
                    "after_batch_id": newest[record.partition],
                    "epoch": marker.get("epoch", 0),
                }
            )
        newest[record.partition] = max(newest.get(record.partition, -1), batch)
    return found


def _seed() -> int:
    seed = int(os.environ.get("STATEKEEPER_E2E_SEED", random.randrange(1 << 30)))
    print(
        f"freeze seed {seed}, {FREEZES} host freezes "
        f"(rerun with STATEKEEPER_E2E_SEED={seed} STATEKEEPER_CLUSTER_FREEZES={FREEZES})"
    )
    return seed


def _batches(status: dict[str, Any]) -> int:
    return int((status.get("throughput") or {}).get("batches", 0))


def _executors(status: dict[str, Any]) -> list[str]:
    return list((status.get("placement") or {}).get("executors") or [])


def _with_spark_conf(app: AppUnderTest, conf: dict[str, str]) -> AppUnderTest:
    """``app`` with ``conf`` added to its spec's Spark conf."""
    raw = yaml.safe_load(app.spec_path.read_text())
    raw.setdefault("spark", {}).setdefault("conf", {}).update(conf)
    app.spec_path.write_text(yaml.safe_dump(raw))
    app.spec = load_app_spec(app.spec_path)
    return app


class _Feed:
    """The input, produced in slices as the series asks for them; ``tag(records, n)`` may
    rewrite the ``n``-th slice (see :func:`_phase_words`)."""

    def __init__(
        self, bootstrap: str, topic: str, records: list, tag: Callable[[list, int], list]
    ) -> None:
        self.bootstrap, self.topic, self.records, self.at = bootstrap, topic, records, 0
        self.tag, self.slices = tag, 0

    def __call__(self, count: int) -> int:
        part = self.records[self.at : self.at + count]
        if part:
            produce(self.bootstrap, self.topic, self.tag(part, self.slices), partitions=PARTITIONS)
            self.slices += 1
        self.at += len(part)
        return len(part)

    @property
    def left(self) -> int:
        return len(self.records) - self.at


def _warm_on(status: dict[str, Any], executor: str, prefixes: list[str]) -> list[str]:
    """Stateful tasks active on ``executor`` whose last run there reused the open copy (the
    task runs there from batch to batch, not just moved)."""
    info = status.get("tasks") or {}
    return [
        t
        for t in active_on(status, executor, prefixes)
        if (info.get(t) or {}).get("warm") and str((info.get(t) or {}).get("executor")) == executor
    ]


def _phase_words(records: list, phase: int) -> list:
    """word_count lines whose every word carries the slice number (``apple`` -> ``appleq7``):
    the counts one slice updates are never updated by a later one. Otherwise a stale count
    a zombie writes would be overwritten by the next batch that counts the same word (most
    words are in every batch), and the damage, though real, would hide."""

    def tagged(text: bytes) -> bytes:
        return TAGGABLE.sub(lambda m: m.group(0) + f"q{phase}", text.decode()).encode()

    out = []
    for r in records:
        try:
            value = tagged(r.value) if r.value is not None else None
        except UnicodeDecodeError:  # a malformed line stays as it is (it goes to the DLQ)
            value = r.value
        out.append(dataclasses.replace(r, value=value))
    return out


def _run_with_host_freezes(
    app: AppUnderTest,
    cluster: Any,
    records: list,
    topic: str,
    seed: int,
    batch: int,
    tag: Callable[[list, int], list] = lambda records, _phase: records,
    busy_cpu_s: float = 0.05,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run ``app`` on ``cluster`` while ``records`` go in, and freeze a host ``FREEZES``
    times: each time while its executor works through a fresh chunk (three batches of
    ``batch`` records) with warm stateful tasks placed there; more input for the survivor;
    thaw once the driver moved those tasks and the survivor committed two more batches and
    processed everything fed so far. "Works through": one of its Python workers used
    ``busy_cpu_s`` of CPU within 0.1 s (a Spark task with nothing to run uses less).
    Returns the final status and what each freeze saw."""
    rng = random.Random(seed)
    bootstrap = app.overrides["bootstrap_servers"]
    prefixes = stateful_prefixes(app.spec.build_topology())
    log = app.workdir / "run0.log"
    feed = _Feed(bootstrap, topic, records, tag)
    feed(2 * batch)
    proc = app.process(0, stop_when_idle=False).start()
    freezes: list[dict[str, Any]] = []
    frozen: int | None = None
    try:
        proc.wait_for(lambda s: _batches(s) >= 1, 240)
        for k in range(FREEZES):
            # Both executors live (after a thaw, the victim's worker gets a new one) and one
            # runs stateful tasks warm: small slices of input until it does.
            deadline = time.monotonic() + 240
            while True:
                status = proc.wait_for(lambda s: len(_executors(s)) >= 2, 240)
                warm = {
                    w.index: (e, _warm_on(status, e, prefixes))
                    for w in cluster.workers
                    for e in executors_of_worker(w)
                    if e in _executors(status) and _warm_on(status, e, prefixes)
                }
                if warm:
                    break
                assert time.monotonic() < deadline, f"no warm stateful task: {status}"
                done = _batches(status)
                feed(batch // 3)
                proc.wait_for(lambda s, b=done: _batches(s) > b, 120)
            victim = rng.choice(sorted(warm))
            executor, tasks = warm[victim]
            log_offset = log.stat().st_size if log.exists() else 0
            feed(3 * batch)  # the freeze lands while the victim works through it
            busy = wait_python_busy(cluster, victim, min_cpu_s=busy_cpu_s, timeout_s=60)
            done = _batches(proc.status() or status)
            frozen_at = time.monotonic()
            frozen = victim
            pids = cluster.freeze_worker(victim)
            zombies = python_workers(cluster, victim)
            feed(3 * batch)  # the survivor takes the tasks over and works through more
            moved = proc.wait_for(lambda s, e=executor: moved_off(s, e, prefixes), 300)
            moved_s = time.monotonic() - frozen_at
            at_move = _batches(moved)
            after = proc.wait_for(lambda s, b=at_move: _batches(s) >= b + 2, 240)
            committed_s = time.monotonic() - frozen_at
            # Everything fed so far is processed: the counts of every slice so far are
            # final, and whatever the zombie writes of them now is stale.
            after = wait_drained(proc, bootstrap)
            drained_s = time.monotonic() - frozen_at
            lost = executor_lost_lines(log, executor, log_offset)
            time.sleep(rng.uniform(0.0, 5.0))  # the master drops the worker after 20-40 s
            held_s = time.monotonic() - frozen_at
            cluster.thaw_worker(victim)
            frozen = None
            after_thaw = follow_after_thaw(zombies)
            freezes.append(
                {
                    "freeze": k,
                    "worker": victim,
                    "executor": executor,
                    "warm_tasks_there": tasks,
                    "python_busy_cpu_s": busy,
                    "batches_at_freeze": done,
                    "pids_frozen": len(pids),
                    "moved_after_s": round(moved_s, 1),
                    "two_batches_after_s": round(committed_s, 1),
                    "drained_after_s": round(drained_s, 1),
                    "thawed_after_s": round(held_s, 1),
                    "python_workers_after_thaw": after_thaw,
                    "driver_log": [line[:160] for line in lost[:3]],
                    "executors_after": _executors(after),
                    "moves_total": (after.get("placement") or {}).get("moves_total"),
                }
            )
            print(f"freeze {k}: {json.dumps(freezes[-1])}")
        proc.wait_for(lambda s: len(_executors(s)) >= 2, 240)
        while feed.left:
            feed(5 * batch)
        wait_drained(proc, bootstrap)
        proc.terminate()
        code = proc.wait(120)
        assert code == 0, log.read_text()[-4000:]
    finally:
        if frozen is not None:
            cluster.thaw_worker(frozen)  # never leave a stopped process behind
        proc.kill9()
    return proc.status() or {}, freezes


def _copies(
    app: AppUnderTest, cluster: Any, status: dict[str, Any], store: str
) -> list[tuple[str, str, dict[Any, Any]]]:
    """Every executor's local copy of ``store`` that the final assignment uses (the active
    copy and the standbys of each task), opened read-only: (task, role, entries). Asserts an
    active copy needed no changelog record to reach the last commit (it was current)."""
    topology = app.spec.build_topology()
    placed = (status.get("placement") or {}).get("tasks") or {}
    found = []
    for worker in cluster.workers:
        ours = executors_of_worker(worker)
        settings = app.settings.model_copy(update={"state_dir": Path(worker.state_dir)})
        env = StateEnvironment(settings, read_only=True)
        try:
            for task, where in sorted(placed.items()):
                sub, partition = (int(x) for x in task.split("_"))
                specs = topology.store_specs(sub)
                if store not in {s.name for s in specs}:
                    continue
                if not (Path(worker.state_dir) / app.app_id / task).is_dir():
                    continue
                if where.get("executor") in ours:
                    role = "active"
                elif ours & set(where.get("standbys") or []):
                    role = "standby"
                else:
                    continue  # a copy left behind by a task that moved away: unused
                state = env.task(task, partition, specs)
                outcomes = state.open()
                try:
                    if role == "active":
                        behind = [o for o in outcomes if o.restored_records]
                        assert not behind, (
                            f"{task} active@worker-{worker.index} {where} needed changelog "
                            f"records: {json.dumps([_outcome(app, o) for o in behind])}"
                        )
                    typed = state.store(store)
                    if isinstance(typed, WindowStore):
                        entries = {(k, start): v for k, start, v in typed.all()}
                    else:
                        entries = dict(typed.all())
                    found.append((task, f"{role}@worker-{worker.index}", entries))
                finally:
                    state.close()
        finally:
            env.close()
    return found


def _outcome(app: AppUnderTest, o: Any) -> dict[str, Any]:
    """A restore outcome, with the changelog records it applied (offset, key, headers)."""
    bootstrap = app.overrides["bootstrap_servers"]
    end = (o.marker_offset or 0) + 1
    records = read_topic(bootstrap, o.job.topic).get(o.job.partition, [])
    return {
        "topic": o.job.topic,
        "partition": o.job.partition,
        "start": o.start_offset,
        "marker": o.marker_offset,
        "batch": o.last_marker and o.last_marker.batch_id,
        "epoch": o.last_marker and o.last_marker.epoch,
        "restored": o.restored_records,
        "fence": o.fence,
        "records": [
            [
                r.offset,
                (r.key or b"")[:40].decode(errors="replace"),
                [(n, bytes(v or b"").decode(errors="replace")) for n, v in (r.headers or [])],
            ]
            for r in records
            if o.start_offset - 3 <= r.offset < end
        ],
    }


def _assert_copies_equal(
    app: AppUnderTest, cluster: Any, status: dict[str, Any], store: str, expected: dict
) -> None:
    """Active copies together hold exactly ``expected``; every other copy of a task (a
    standby) equals its task's active copy."""
    copies = _copies(app, cluster, status, store)
    active = {task: entries for task, role, entries in copies if role.startswith("active")}
    assert active, "no active copy checked"
    merged = {k: v for entries in active.values() for k, v in entries.items()}
    assert merged == expected, _diff("active copies", "merged", merged, expected)
    for task, role, entries in copies:
        if task in active:
            assert entries == active[task], _diff(task, role, entries, active[task])
    print(
        f"{store}: {len(copies)} local copies equal the recomputation: "
        f"{sorted((t, r) for t, r, _ in copies)}"
    )


def _diff(task: str, role: str, got: dict, want: dict) -> str:
    """The keys where ``got`` and ``want`` differ, expected vs got (at most 20)."""
    keys = sorted(set(got) | set(want), key=repr)
    wrong = [(k, want.get(k, "<absent>"), got.get(k, "<absent>")) for k in keys]
    wrong = [w for w in wrong if w[1] != w[2]]
    lines = [f"{k!r}: expected {e!r}, got {g!r}" for k, e, g in wrong[:20]]
    return f"{task} ({role}): {len(wrong)} keys differ:\n  " + "\n  ".join(lines)


def _fresh(app: AppUnderTest, tmp_path: Path) -> Any:
    return app.settings.model_copy(
        update={"state_dir": tmp_path / "rebuilt", "restore_from_snapshots": False}
    )


def _print_regressions(bootstrap: str, app: AppUnderTest, stores: list[str]) -> None:
    for store in stores:
        found = marker_regressions(bootstrap, changelog_topic(app.app_id, store))
        print(f"{store}: commit markers below an earlier marker's batch: {json.dumps(found)}")


@contextlib.contextmanager
def _soft(problems: list[str], what: str) -> Iterator[None]:
    """Run one check; a failed assertion is kept in ``problems`` (and printed) instead of
    ending the test, so one run shows every check that failed."""
    try:
        yield
    except AssertionError as exc:
        problems.append(f"[{what}] {exc}")
        print(f"CHECK FAILED [{what}] {str(exc)[:12000]}")


def _check_fencing(
    status: dict[str, Any], bootstrap: str, app: AppUnderTest, stores: list[str]
) -> None:
    fenced = fenced_total(status)
    stale = {s: stale_epoch_writes(bootstrap, changelog_topic(app.app_id, s)) for s in stores}
    repartition = stale_repartition_writes(bootstrap, app.app_id)
    print(
        f"fenced records in the status: {status.get('fencing', {}).get('by_kind')}; zombie "
        f"writes in the changelogs: {stale}, in the repartition topics: {repartition}"
    )
    # A zombie that wrote after its thaw must have been fenced and reported. One killed on
    # its thaw before it wrote (its host's Worker kills the stale executor within a second
    # when the master gave the host up first) leaves nothing to fence.
    if EXPECT_FENCING and sum(stale.values()):
        assert fenced > 0, f"zombie changelog writes {stale}, no fenced record reported"
    if EXPECT_FENCING and repartition:
        assert fenced_total(status, "repartition records") > 0, (
            f"{repartition} zombie repartition writes, none reported fenced"
        )
    # Over a series, some zombie writes (to a changelog or a repartition topic, whichever
    # the frozen host's tasks were writing when it thawed): else it did not test fencing.
    if FREEZES >= SERIES:
        assert sum(stale.values()) + repartition > 0, f"{FREEZES} freezes and no zombie wrote"


def test_word_count_is_exact_after_host_freezes(broker, spark_cluster, tmp_path) -> None:
    seed = _seed()
    suffix = uuid.uuid4().hex[:6]
    topic, out = f"lines-{suffix}", f"word-counts-{suffix}"
    app = AppUnderTest.create(
        "word_count",
        broker.bootstrap_servers,
        tmp_path,
        suffix,
        {"input_topic": topic, "output_topic": out},
        spark_master=spark_cluster.master_url,
        num_standby_replicas=1,
        max_records_per_batch=8_000,
        commit_interval_ms=500,
        trigger_interval_ms=200,
    )
    _with_spark_conf(app, CLUSTER_FAILOVER_CONF)
    records = list(word_count_lines(32_000 + 60_000 * FREEZES, seed=seed))
    status, freezes = _run_with_host_freezes(
        app, spark_cluster, records, topic, seed, 8_000, _phase_words
    )
    print(f"word_count host freezes: {json.dumps(freezes)}")
    assert status["state"] == "NOT_RUNNING"

    bootstrap = broker.bootstrap_servers
    _print_regressions(bootstrap, app, ["word-counts"])
    expected = wc_ref.recompute(read_topic(bootstrap, topic))
    topology = app.spec.build_topology()
    problems: list[str] = []  # every check runs; the test fails with all that failed
    with _soft(problems, "changelog"):
        rebuilt = read_store(_fresh(app, tmp_path), topology, "word-counts", PARTITIONS)
        assert rebuilt == expected.counts, _diff("changelog", "rebuilt", rebuilt, expected.counts)
    with _soft(problems, "local copies"):
        _assert_copies_equal(app, spark_cluster, status, "word-counts", expected.counts)
    with _soft(problems, "output"):
        latest: dict[str, int] = {}
        for record in deduped(bootstrap, out):
            latest[record.key.decode()] = int(record.value)  # type: ignore[union-attr,arg-type]
        assert latest == expected.counts, _diff("output", "latest", latest, expected.counts)
    with _soft(problems, "DLQ"):
        dlq = deduped(bootstrap, dlq_topic(app.app_id))
        assert sorted(sources_of(dlq)) == sorted(expected.dlq)
    with _soft(problems, "fencing"):
        _check_fencing(status, bootstrap, app, ["word-counts"])
    assert not problems, f"freezes {json.dumps(freezes)}:\n\n" + "\n\n".join(problems)


@pytest.mark.chaos
def test_patient_monitoring_is_exact_after_host_freezes(broker, spark_cluster, tmp_path) -> None:
    seed = _seed()
    suffix = uuid.uuid4().hex[:6]
    topic = f"patient-events-{suffix}"
    alerts, heart_rate = f"patient-alerts-{suffix}", f"heart-rate-{suffix}"
    app = AppUnderTest.create(
        "patient_monitoring",
        broker.bootstrap_servers,
        tmp_path,
        suffix,
        {"input_topic": topic, "alerts_topic": alerts, "heart_rate_topic": heart_rate},
        spark_master=spark_cluster.master_url,
        max_records_per_batch=4_000,
        commit_interval_ms=500,
        trigger_interval_ms=200,
    )
    _with_spark_conf(app, CLUSTER_FAILOVER_CONF)
    events = patient_events(patients=24, minutes=15 + 16 * FREEZES, seed=seed, malformed_share=0.01)
    status, freezes = _run_with_host_freezes(
        app, spark_cluster, events, topic, seed, 4_000, busy_cpu_s=0.03
    )
    print(f"patient host freezes: {json.dumps(freezes)}")
    assert status["state"] == "NOT_RUNNING"

    bootstrap = broker.bootstrap_servers
    _print_regressions(bootstrap, app, ["pulse-counts", "heart-rate"])
    expected = pm_ref.recompute(read_topic(bootstrap, topic))
    topology = app.spec.build_topology()
    fresh = _fresh(app, tmp_path)
    problems: list[str] = []  # every check runs; the test fails with all that failed
    with _soft(problems, "changelog pulse-counts"):
        windows = read_store(fresh, topology, "pulse-counts", PARTITIONS)
        assert windows == expected.pulse_windows, _diff(
            "changelog", "rebuilt", windows, expected.pulse_windows
        )
    with _soft(problems, "changelog heart-rate"):
        table = read_store(fresh, topology, "heart-rate", PARTITIONS)
        assert table == expected.heart_rate, _diff(
            "changelog", "rebuilt", table, expected.heart_rate
        )
    with _soft(problems, "local copies pulse-counts"):
        _assert_copies_equal(app, spark_cluster, status, "pulse-counts", expected.pulse_windows)
    with _soft(problems, "local copies heart-rate"):
        _assert_copies_equal(app, spark_cluster, status, "heart-rate", expected.heart_rate)
    with _soft(problems, "DLQ"):
        dlq = deduped(bootstrap, dlq_topic(app.app_id))
        assert sorted(sources_of(dlq)) == sorted(expected.dlq)
    with _soft(problems, "alerts output"):
        got_alerts = [json.loads(r.value) for r in deduped(bootstrap, alerts)]  # type: ignore[arg-type]
        key = lambda a: json.dumps(a, sort_keys=True)  # noqa: E731
        assert sorted(got_alerts, key=key) == sorted(expected.alerts, key=key)
    with _soft(problems, "heart-rate output"):
        outputs = [
            (r.key.decode(), json.loads(r.value) if r.value is not None else None)  # type: ignore[union-attr]
            for r in deduped(bootstrap, heart_rate)
        ]
        latest = pm_ref.latest_heart_rate(outputs)
        assert latest == expected.heart_rate, _diff("output", "latest", latest, expected.heart_rate)
    with _soft(problems, "fencing"):
        _check_fencing(status, bootstrap, app, ["pulse-counts", "heart-rate"])
    assert not problems, f"freezes {json.dumps(freezes)}:\n\n" + "\n\n".join(problems)
