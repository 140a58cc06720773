"""LocalSparkCluster: a real standalone master and two workers on 127.0.0.1.

The tests run in file order on one cluster (module-scoped fixture): a driver in a
subprocess keeps an application with one executor per worker running while the tests look
at listeners, kill worker 0 and restart it, freeze worker 1 and thaw it; the last cluster
test freezes a worker again and stops it all. The driver is a subprocess because a
SparkContext is per process and the tests' local[2] session may live in this one. The
freeze/thaw/kill/stop mechanics are also checked without Spark, on a fake "host" (a process
group and a child in a group of its own, as pyspark's daemon is).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statekeeper.cluster.local_cluster import (
    CLUSTER_MARKER_ENV,
    STATE_FILE,
    ClusterConfig,
    LocalSparkCluster,
    WorkerInfo,
)
from statekeeper.process_identity import ProcessIdentity
from statekeeper.procfs import proc_stat, start_ticks

pytestmark = pytest.mark.xdist_group("spark_cluster")

REPO = Path(__file__).resolve().parents[2]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _listen_addresses() -> dict[int, tuple[str, int]]:
    """Listening TCP sockets of this machine: inode -> (address, port)."""
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # LISTEN
                continue
            hex_addr, hex_port = fields[1].split(":")
            raw = bytes.fromhex(hex_addr)
            # The kernel prints each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            found[int(fields[9])] = (str(ipaddress.ip_address(raw)), int(hex_port, 16))
    return found


def _listeners(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every listening socket the processes hold."""
    sockets = _listen_addresses()
    found = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inode = int(target[len("socket:[") : -1])
                if inode in sockets:
                    found.append((pid, *sockets[inode]))
    return found


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip) == ipaddress.ip_address("127.0.0.1")


def _state(pid: int) -> str:
    """``/proc/<pid>/stat``'s state letter ('T': stopped by a signal), '' when gone."""
    stat = proc_stat(pid)
    return "" if stat is None else stat.state


def _wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def app_on_cluster(
    spark_cluster: LocalSparkCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """A driver (tests/cluster/probe_driver.py) whose application runs on the cluster; yields
    what its Python workers reported, plus the process as ``proc``."""
    work = tmp_path_factory.mktemp("probe-driver")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "include")])
    log = work / "driver.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster.probe_driver", spark_cluster.master_url, work],
            cwd=REPO,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
        )
    lines: list[bytes] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(120)
    try:
        assert lines and lines[0], f"the driver printed nothing; see {log}:\n{log.read_text()}"
        yield {**json.loads(lines[0]), "proc": proc, "log": log}
    finally:
        if proc.poll() is None:
            with_stdin = proc.stdin
            assert with_stdin is not None
            try:
                with_stdin.write(b"stop\n")
                with_stdin.flush()
                proc.wait(60)
            except (OSError, subprocess.TimeoutExpired):
                proc.kill()
                proc.wait()


def test_both_workers_register_and_listen_on_loopback_only(
    spark_cluster: LocalSparkCluster, app_on_cluster: dict[str, Any]
) -> None:
    assert spark_cluster.alive_worker_indexes() == [0, 1]
    assert len(spark_cluster.alive_workers()) == 2
    assert all(w.alive() for w in spark_cluster.workers)
    assert len({w.state_dir for w in spark_cluster.workers}) == 2
    # The master, the workers, their executors and Python daemons: all of the cluster.
    pids = spark_cluster.processes()
    executors = [p for p in pids if "CoarseGrainedExecutorBackend" in _cmdline(p)]
    assert len(executors) == 2, [_cmdline(p)[:200] for p in pids]
    listeners = _listeners(pids)
    ours = {spark_cluster.master.pid, *(w.pid for w in spark_cluster.workers), *executors}
    # master: RPC + web UI; each worker: RPC + web UI; each executor: its block manager at least
    assert {pid for pid, _, _ in listeners} >= ours, listeners
    assert all(_is_loopback(address) for _, address, _ in listeners), listeners
    assert 6066 not in {port for _, _, port in listeners}  # the REST server is off
    state = json.loads((spark_cluster.base_dir / STATE_FILE).read_text())
    assert [w["pid"] for w in state["workers"]] == [w.pid for w in spark_cluster.workers]


def test_spark_master_setting_runs_the_app_on_the_cluster(
    spark_cluster: LocalSparkCluster, app_on_cluster: dict[str, Any]
) -> None:
    """``StatekeeperApp._spark`` with ``spark_master=spark://...`` (what ``app run --set``
    does) must not fall back to local[*]: the job ran on the cluster's executors."""
    assert app_on_cluster["master"] == spark_cluster.master_url
    assert app_on_cluster["app_name"] == "statekeeper-cluster-probe"  # not "pyspark-shell"
    active = (spark_cluster.master_status() or {}).get("activeapps", [])
    assert [app["name"] for app in active] == ["statekeeper-cluster-probe"]
    seen = app_on_cluster["workers"]
    assert {s["executor"] for s in seen} == {"0", "1"}
    cluster_pids = set(spark_cluster.processes())
    assert {s["executor_pid"] for s in seen} <= cluster_pids
    assert {s["python_pid"] for s in seen} <= cluster_pids
    assert {s["python"] for s in seen} == {sys.executable}


def test_each_executor_sees_its_workers_state_dir(
    spark_cluster: LocalSparkCluster, app_on_cluster: dict[str, Any]
) -> None:
    seen = app_on_cluster["workers"]
    by_executor = {s["executor"]: s["state_dir"] for s in seen}
    assert len(set(by_executor.values())) == 2
    assert set(by_executor.values()) == {w.state_dir for w in spark_cluster.workers}
    for s in seen:  # the executor whose pid sits in worker i's processes has worker i's dir
        worker = next(
            w
            for w in spark_cluster.workers
            if s["executor_pid"] in spark_cluster.worker_processes(w.index)
        )
        assert s["state_dir"] == worker.state_dir


def test_kill_worker_takes_down_its_executor_and_python_workers(
    spark_cluster: LocalSparkCluster, app_on_cluster: dict[str, Any]
) -> None:
    before = spark_cluster.worker_processes(0)
    commands = [_cmdline(p) for p in before]
    assert any("deploy.worker.Worker" in c for c in commands), commands
    assert any("CoarseGrainedExecutorBackend" in c for c in commands), commands
    assert any("pyspark.daemon" in c for c in commands), commands
    ticks = {pid: start_ticks(pid) for pid in before}
    other = spark_cluster.worker_processes(1)

    killed = spark_cluster.kill_worker(0)

    assert set(killed) >= set(before)
    assert [pid for pid in before if start_ticks(pid) == ticks[pid]] == []
    assert spark_cluster.worker_processes(0) == []
    assert not spark_cluster.workers[0].alive()
    assert all(start_ticks(pid) is not None for pid in other)  # worker 1 untouched
    _wait_for(lambda: spark_cluster.alive_worker_indexes() == [1], 30, "the master to drop it")
    assert len(spark_cluster.alive_workers()) == 1


def test_restart_worker_brings_it_back_with_the_same_dirs(
    spark_cluster: LocalSparkCluster, app_on_cluster: dict[str, Any]
) -> None:
    if spark_cluster.workers[0].alive():  # the kill test did not run first (a -k selection)
        spark_cluster.kill_worker(0)
    old = spark_cluster.workers[0]
    new = spark_cluster.restart_worker(0)
    assert new.pid != old.pid and new.alive()
    assert (new.state_dir, new.work_dir, new.webui_port) == (
        old.state_dir,
        old.work_dir,
        old.webui_port,
    )
    assert spark_cluster.alive_worker_indexes() == [0, 1]
    # The running application gets an executor on it again, with the worker's environment.
    _wait_for(
        lambda: any(
            "CoarseGrainedExecutorBackend" in _cmdline(p) for p in spark_cluster.worker_processes(0)
        ),
        30,
        "an executor on the restarted worker",
    )
    executor = next(
        p
        for p in spark_cluster.worker_processes(0)
        if "CoarseGrainedExecutorBackend" in _cmdline(p)
    )
    environ = Path(f"/proc/{executor}/environ").read_bytes().split(b"\0")
    assert f"STATEKEEPER_EXECUTOR_STATE_DIR={old.state_dir}".encode() in environ


def test_freeze_worker_stops_every_process_of_its_host_and_thaw_continues_them(
    spark_cluster: LocalSparkCluster, app_on_cluster: dict[str, Any]
) -> None:
    before = spark_cluster.worker_processes(1)
    commands = {pid: _cmdline(pid) for pid in before}
    assert any("deploy.worker.Worker" in c for c in commands.values()), commands
    assert any("CoarseGrainedExecutorBackend" in c for c in commands.values()), commands
    assert any("pyspark.daemon" in c for c in commands.values()), commands
    other = spark_cluster.worker_processes(0)
    try:
        frozen = spark_cluster.freeze_worker(1)

        assert set(frozen) >= set(before)
        assert {pid: _state(pid) for pid in frozen} == {pid: "T" for pid in frozen}
        assert all(_state(pid) not in ("T", "") for pid in other)  # worker 0 runs on
        assert spark_cluster.frozen_workers() == [1]
        assert [w["frozen"] for w in spark_cluster.status()["workers"]] == [False, True]
        # Another process (``statekeeper cluster status``/``stop``) sees it frozen.
        assert LocalSparkCluster.attach(spark_cluster.base_dir).frozen_workers() == [1]
    finally:
        thawed = spark_cluster.thaw_worker(1)

    assert set(thawed) >= set(frozen)
    assert all(_state(pid) not in ("T", "") for pid in frozen), {p: _state(p) for p in frozen}
    assert spark_cluster.frozen_workers() == []
    assert spark_cluster.thaw_worker(1) == []  # not frozen: nothing to do
    assert spark_cluster.workers[1].alive()


def test_stop_leaves_no_process(
    spark_cluster: LocalSparkCluster, app_on_cluster: dict[str, Any]
) -> None:
    running = spark_cluster.processes()
    assert len(running) >= 5  # master, 2 workers, executors, Python daemons
    ticks = {pid: start_ticks(pid) for pid in running}
    # A frozen worker is stopped too, without waiting for it to handle SIGTERM.
    spark_cluster.freeze_worker(1)
    started = time.monotonic()
    spark_cluster.stop()
    assert time.monotonic() - started < 20
    assert [pid for pid in running if start_ticks(pid) == ticks[pid]] == []
    assert spark_cluster.processes() == []
    assert spark_cluster.alive_workers() == []
    spark_cluster.stop()  # idempotent


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statekeeper.cli", "cluster", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_start_status_stop(tmp_path: Path) -> None:
    base = str(tmp_path / "cluster")
    started = _cli("start", "--workers", "1", "--memory", "1g", "--run-dir", base)
    try:
        assert started.returncode == 0, started.stderr
        assert (
            "statekeeper app run --app SPEC --set spark_master=spark://127.0.0.1:" in started.stdout
        )

        status = _cli("status", "--dir", base, "--json")  # --dir: the old name, still taken
        assert status.returncode == 0, status.stderr
        up = json.loads(status.stdout)
        assert up["running"] and up["alive_workers"] == 1
        assert f"--set spark_master={up['master_url']}" in started.stdout
        pids = [up["master_pid"], up["workers"][0]["pid"]]

        again = _cli("start", "--run-dir", base, "--json")
        assert again.returncode == 2 and "still runs" in again.stderr, again.stderr
        assert "still runs" in json.loads(again.stdout)["error"]  # one JSON object too

        stopped = _cli("stop", "--run-dir", base, "--json")
        assert stopped.returncode == 0, stopped.stderr
        assert set(json.loads(stopped.stdout)["stopped"]) >= set(pids)
        assert all(start_ticks(pid) is None for pid in pids)

        down = _cli("status", "--run-dir", base, "--json")
        assert down.returncode == 3
        assert json.loads(down.stdout)["running"] is False
    finally:
        if Path(base, STATE_FILE).exists():
            LocalSparkCluster.attach(Path(base)).stop()


# -- freeze, thaw, kill and stop on a fake host (no Spark) -------------------------------------

#: A "worker": its process sleeps and forks a child that leaves the group, as pyspark's
#: daemon does (``os.setpgid(0, 0)``); both carry the worker's marker. Bounded: each
#: exits on its own after 120 s.
FAKE_HOST = """
import os, time
deadline = time.monotonic() + 120
if os.fork() == 0:
    os.setpgid(0, 0)
while time.monotonic() < deadline:
    time.sleep(0.02)
"""


@contextlib.contextmanager
def _fake_host(tmp_path: Path) -> Iterator[tuple[LocalSparkCluster, list[int]]]:
    # A long SIGTERM wait: a stop that waited for stopped processes would take all of it, one
    # that kills them takes a fraction of a second (no tight timing on a loaded machine).
    cluster = LocalSparkCluster(ClusterConfig(base_dir=tmp_path, workers=1, stop_timeout_s=60))
    env = {**os.environ, CLUSTER_MARKER_ENV: str(cluster.worker_dir(0))}
    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE_HOST], env=env, start_new_session=True, cwd=tmp_path
    )
    try:
        cluster._workers = [WorkerInfo("worker-0", ProcessIdentity.of(proc.pid), "", 0, index=0)]
        _wait_for(lambda: len(cluster.worker_processes(0)) == 2, 30, "the fake host's child")
        pids = cluster.worker_processes(0)
        groups = {proc_stat(pid).group for pid in pids}  # type: ignore[union-attr]
        assert len(groups) == 2, groups  # the child left the worker's group
        yield cluster, pids
    finally:
        for pid in cluster.processes():  # whatever the test left: never stopped, never alive
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        proc.kill()
        proc.wait(10)


def test_freeze_and_thaw_a_fake_host(tmp_path: Path) -> None:
    with _fake_host(tmp_path) as (cluster, pids):
        try:
            assert sorted(cluster.freeze_worker(0)) == sorted(pids)
            assert [_state(pid) for pid in pids] == ["T", "T"]
            assert cluster.freeze_worker(0) == sorted(pids)  # again: nothing new
            state = json.loads(cluster.state_file.read_text())
            assert sorted(pid for pid, _ in state["frozen"]["0"]) == sorted(pids)
        finally:
            thawed = cluster.thaw_worker(0)
        assert sorted(thawed) == sorted(pids)
        assert all(_state(pid) not in ("T", "") for pid in pids)
        assert json.loads(cluster.state_file.read_text())["frozen"] == {}


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_kill_of_a_frozen_fake_host(tmp_path: Path, how: str) -> None:
    with _fake_host(tmp_path) as (cluster, pids):
        ticks = {pid: start_ticks(pid) for pid in pids}
        cluster.freeze_worker(0)
        cluster.kill_worker(0, getattr(signal, how))
        _wait_for(
            lambda: all(start_ticks(pid) != ticks[pid] for pid in pids), 10, f"{how} to end it"
        )
        assert cluster.frozen_workers() == []


def test_stop_of_a_frozen_fake_host_does_not_wait_for_sigterm(tmp_path: Path) -> None:
    with _fake_host(tmp_path) as (cluster, pids):
        ticks = {pid: start_ticks(pid) for pid in pids}
        cluster.freeze_worker(0)
        started = time.monotonic()
        cluster.stop()
        assert time.monotonic() - started < cluster.config.stop_timeout_s
        assert all(start_ticks(pid) != ticks[pid] for pid in pids)
        assert cluster.processes() == []


def test_stop_ends_processes_frozen_by_another_process(tmp_path: Path) -> None:
    """``statekeeper cluster stop`` (attach) of a worker someone else froze: the stopped
    processes are killed, not waited for."""
    with _fake_host(tmp_path) as (cluster, pids):
        ticks = {pid: start_ticks(pid) for pid in pids}
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        # The other process's freeze is done before the stop: SIGSTOP takes effect
        # asynchronously, and a process still running gets SIGTERM and the whole timeout.
        _wait_for(
            lambda: all((st := proc_stat(pid)) is not None and st.state == "T" for pid in pids),
            10,
            "the SIGSTOPs to take effect",
        )
        cluster._write_state()
        other = LocalSparkCluster.attach(tmp_path)
        started = time.monotonic()
        other.stop()
        assert time.monotonic() - started < cluster.config.stop_timeout_s
        assert all(start_ticks(pid) != ticks[pid] for pid in pids)
