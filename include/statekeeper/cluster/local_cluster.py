"""A real Spark standalone cluster on this machine: one master and N workers, all on 127.0.0.1.

The pyspark wheel has no ``sbin/start-*.sh`` scripts, but its ``bin/spark-class`` runs the
standalone ``Master`` and ``Worker``. Each worker stands in for a separate host: its own work
directory (``SPARK_WORKER_DIR``) and its own statekeeper state directory, given to its
executors through the worker JVM's environment (:data:`EXECUTOR_STATE_DIR_ENV`; executors and
their Python workers inherit it). Workers also hand executors this interpreter
(``PYSPARK_PYTHON``) and ``include/`` on ``PYTHONPATH``, so Python workers import statekeeper.

The master and every worker run in a session (and process group) of their own; a worker's
group holds the worker JVM and the executor JVMs it forks. The executors' pyspark daemons do
not stay in it: ``pyspark/daemon.py`` calls ``os.setpgid(0, 0)``, so the daemon and its
forked Python workers form a group of their own (in the worker's session). Every process
therefore carries :data:`CLUSTER_MARKER_ENV` (``<base>/master`` or ``<base>/worker-<i>``) in
its environment, which children inherit, and :meth:`LocalSparkCluster.kill_worker` and
:meth:`~LocalSparkCluster.stop` signal the recorded groups and every process found with the
marker in ``/proc/<pid>/environ``: a whole "host" goes down, Python workers included.
:meth:`~LocalSparkCluster.freeze_worker` and :meth:`~LocalSparkCluster.thaw_worker` find a
worker's processes the same way and SIGSTOP / SIGCONT them: a host that pauses (a VM
suspended, a partition) and comes back, its processes unaware of the time that passed.

The master and the workers run with ``spark.worker.timeout`` of
:attr:`ClusterConfig.worker_timeout_s` (20 s; Spark's default is 60 s): the master drops a
worker that stopped heartbeating (a frozen one) after 20-40 s and tells the app its
executors are lost, and workers heartbeat every quarter of it.

``<base>/cluster.json`` records each process's identity (pid, start time and boot, see
:mod:`statekeeper.process_identity`: a pid whose start time differs is another process and
is never signalled), ports and directories,
so ``statekeeper cluster stop`` works from another process. Logs go to ``<base>/logs/``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal as signals
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.atomic_file import replace_text
from statekeeper.cluster.executor import EXECUTOR_STATE_DIR_ENV
from statekeeper.errors import StatekeeperError
from statekeeper.process_identity import HoldsProcessIdentity, ProcessIdentity
from statekeeper.procfs import all_pids, boot_id, group_members, proc_stat, start_ticks

#: In the environment of every process of a local cluster (and inherited by its children):
#: ``<base>/master`` or ``<base>/worker-<i>``.
CLUSTER_MARKER_ENV = "STATEKEEPER_LOCAL_CLUSTER"
STATE_FILE = "cluster.json"
LOOPBACK = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: The include/ directory (the one holding the statekeeper package), for PYTHONPATH.
PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
#: freeze_worker stops what it finds, then looks again for processes forked meanwhile.
FREEZE_ROUNDS = 10
#: How long a freeze waits for its processes to show stopped: SIGSTOP is delivered
#: asynchronously (a process running on another core, or in uninterruptible I/O, stops a
#: moment later), and a host is frozen only once none of them runs.
FREEZE_SETTLE_S = 10.0


class ClusterError(StatekeeperError):
    """The local cluster did not start, or its recorded state is unusable."""


@dataclass
class ClusterConfig:
    """How to run a local cluster. Ports of 0 are picked free on 127.0.0.1 at start."""

    base_dir: Path
    workers: int = 2
    cores_per_worker: int = 1
    memory_per_worker: str = "2g"  # what a worker offers its executors
    master_port: int = 0
    master_webui_port: int = 0
    worker_webui_ports: list[int] = field(default_factory=list)  # per worker; missing/0: free
    #: The master's REST submission server (6066 by default in Spark): off unless a port is
    #: given (0 picks a free one). It would otherwise listen on a fixed, often taken, port.
    rest_port: int | None = None
    daemon_memory: str = "512m"  # heap of the master and worker JVMs (SPARK_DAEMON_MEMORY)
    python: str = sys.executable  # what executors run Python workers with
    python_path: list[str] = field(default_factory=lambda: [PACKAGE_ROOT])
    extra_env: dict[str, str] = field(default_factory=dict)  # for every process
    start_timeout_s: float = 90.0
    stop_timeout_s: float = 15.0
    #: ``spark.worker.timeout`` of the master and the workers, in seconds (Spark: 60): how long
    #: the master waits for a worker's heartbeat before it declares the worker (and the
    #: executors on it) lost. Workers heartbeat every quarter of it. None: Spark's default.
    worker_timeout_s: int | None = 20

    def __post_init__(self) -> None:
        self.base_dir = Path(self.base_dir).absolute()
        if self.workers < 1:
            raise ClusterError(f"a cluster needs at least one worker, not {self.workers}")
        if self.cores_per_worker < 1:
            raise ClusterError(f"cores_per_worker must be >= 1, not {self.cores_per_worker}")
        if self.worker_timeout_s is not None and self.worker_timeout_s < 4:
            raise ClusterError(f"worker_timeout_s must be >= 4 s, not {self.worker_timeout_s}")

    def daemon_opts(self) -> str:
        """``-D`` options for the master and the worker JVMs (both read the worker timeout)."""
        if self.worker_timeout_s is None:
            return ""
        return f"-Dspark.worker.timeout={self.worker_timeout_s}"


@dataclass
class ProcessInfo(HoldsProcessIdentity):
    """One started process: enough to find it again (its identity) and to restart it."""

    name: str
    process: ProcessIdentity
    log: str
    webui_port: int

    def alive(self) -> bool:
        """True while the recorded process (not a later one with its pid) runs."""
        return self.process.alive()


@dataclass
class WorkerInfo(ProcessInfo):
    """A worker: its process and the directories that make it a separate "host"."""

    index: int = 0
    work_dir: str = ""
    state_dir: str = ""


def spark_home() -> Path:
    """The installed pyspark package directory, which is a Spark distribution."""
    spec = importlib.util.find_spec("pyspark")  # located, not imported
    if spec is None or not spec.submodule_search_locations:
        raise ClusterError("pyspark is not installed in this interpreter: no Spark to run")
    home = Path(next(iter(spec.submodule_search_locations)))
    if not (home / "bin" / "spark-class").is_file():
        raise ClusterError(f"{home}/bin/spark-class is missing: not a usable Spark home")
    return home


def free_port() -> int:
    """A port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


class LocalSparkCluster:
    """A Spark standalone master and ``config.workers`` workers on 127.0.0.1.

    ``start()`` returns once the master lists every worker ALIVE; ``stop()`` ends them all
    (idempotent). Use it as a context manager to stop it whatever happens.
    :meth:`attach` rebuilds one from ``<base>/cluster.json`` in another process.
    """

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.master: ProcessInfo | None = None
        self._workers: list[WorkerInfo] = []
        self._master_port = config.master_port
        self._started_at = 0.0
        #: Frozen workers (freeze_worker): index -> {pid: identity} of the processes stopped.
        self._frozen: dict[int, dict[int, ProcessIdentity]] = {}

    # -- paths and addresses -------------------------------------------------------------------

    @property
    def base_dir(self) -> Path:
        return self.config.base_dir

    @property
    def state_file(self) -> Path:
        return self.base_dir / STATE_FILE

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``, what an app's ``spark_master`` is set to."""
        if not self._master_port:
            raise ClusterError("the cluster has not been started: no master URL yet")
        return f"spark://{LOOPBACK}:{self._master_port}"

    @property
    def master_webui_url(self) -> str:
        if self.master is None:
            raise ClusterError("the cluster has not been started: no master web UI yet")
        return f"http://{LOOPBACK}:{self.master.webui_port}"

    @property
    def workers(self) -> list[WorkerInfo]:
        """The workers, by index (pid, directories, web UI port, log)."""
        return list(self._workers)

    def worker_dir(self, index: int) -> Path:
        return self.base_dir / f"worker-{index}"

    # -- start ---------------------------------------------------------------------------------

    def start(self) -> LocalSparkCluster:
        """Start the master and the workers; wait until the master lists them all ALIVE."""
        if self.master is not None and self.master.alive():
            raise ClusterError(f"cluster in {self.base_dir} is already running")
        recorded = _read_state(self.state_file)
        if recorded is not None and any(p.alive() for p in _processes_of_state(recorded)):
            raise ClusterError(
                f"a cluster recorded in {self.state_file} still runs: "
                "stop it first (`statekeeper cluster stop`)"
            )
        cfg = self.config
        home = spark_home()
        (self.base_dir / "logs").mkdir(parents=True, exist_ok=True)
        self._started_at = time.time()
        self._master_port = cfg.master_port or free_port()
        webui = cfg.master_webui_port or free_port()
        try:
            self.master = self._launch(
                "master",
                [
                    str(home / "bin" / "spark-class"),
                    MASTER_CLASS,
                    "--host",
                    LOOPBACK,
                    "--port",
                    str(self._master_port),
                    "--webui-port",
                    str(webui),
                ],
                self._env(home, "master", self._master_opts()),
                webui,
            )
            self._write_state()
            self._wait_for_master()
            ports = list(cfg.worker_webui_ports) + [0] * cfg.workers
            self._workers = [
                self._start_worker(home, i, ports[i] or free_port()) for i in range(cfg.workers)
            ]
            self._write_state()
            self._wait_alive(cfg.workers)
        except BaseException:
            self.stop()
            raise
        return self

    def _master_opts(self) -> str:
        rest = self.config.rest_port
        if rest is None:
            opts = "-Dspark.master.rest.enabled=false"
        else:
            opts = (
                f"-Dspark.master.rest.enabled=true -Dspark.master.rest.host={LOOPBACK} "
                f"-Dspark.master.rest.port={rest or free_port()}"
            )
        return f"{opts} {self.config.daemon_opts()}".strip()

    def _env(self, home: Path, role: str, master_opts: str = "") -> dict[str, str]:
        cfg = self.config
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_GATEWAY_")}
        paths = [*cfg.python_path, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
        env.update(
            SPARK_HOME=str(home),
            SPARK_LOCAL_IP=LOOPBACK,
            SPARK_LOCAL_HOSTNAME=LOOPBACK,
            SPARK_DAEMON_MEMORY=cfg.daemon_memory,
            PYSPARK_PYTHON=cfg.python,
            PYTHONPATH=os.pathsep.join(dict.fromkeys(paths)),
        )
        env[CLUSTER_MARKER_ENV] = str(self.base_dir / role)
        if master_opts:
            env["SPARK_MASTER_OPTS"] = f"{env.get('SPARK_MASTER_OPTS', '')} {master_opts}".strip()
        env.update(cfg.extra_env)
        return env

    def _launch(self, name: str, argv: list[str], env: dict[str, str], webui: int) -> ProcessInfo:
        log = self.base_dir / "logs" / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.base_dir,
                start_new_session=True,  # its own process group: killpg reaches its children
            )
        return ProcessInfo(name, ProcessIdentity.of(proc.pid), str(log), webui)

    def _start_worker(self, home: Path, index: int, webui: int) -> WorkerInfo:
        cfg = self.config
        root = self.worker_dir(index)
        work, state = root / "work", root / "state"
        work.mkdir(parents=True, exist_ok=True)
        state.mkdir(parents=True, exist_ok=True)
        env = self._env(home, f"worker-{index}")
        env["SPARK_WORKER_DIR"] = str(work)
        opts = f"{env.get('SPARK_WORKER_OPTS', '')} {cfg.daemon_opts()}".strip()
        if opts:
            env["SPARK_WORKER_OPTS"] = opts
        env[EXECUTOR_STATE_DIR_ENV] = str(state)
        argv = [
            str(home / "bin" / "spark-class"),
            WORKER_CLASS,
            "--host",
            LOOPBACK,
            "--webui-port",
            str(webui),
            "--cores",
            str(cfg.cores_per_worker),
            "--memory",
            cfg.memory_per_worker,
            "--work-dir",
            str(work),
            self.master_url,
        ]
        proc = self._launch(f"worker-{index}", argv, env, webui)
        return WorkerInfo(
            proc.name,
            proc.process,
            proc.log,
            proc.webui_port,
            index=index,
            work_dir=str(work),
            state_dir=str(state),
        )

    def _wait_for_master(self) -> None:
        assert self.master is not None
        # A worker that registers with a master not yet ALIVE (still STANDBY) is told so and
        # retries only 5-15 s later: start workers once the master says ALIVE.
        self._wait(
            lambda: (self._master_json() or {}).get("status") == "ALIVE",
            f"the master ALIVE at {self.master_webui_url}/json/",
            [self.master],
        )

    def _wait_alive(self, count: int, watched: Iterable[ProcessInfo] = ()) -> None:
        watched = [p for p in [self.master, *(watched or self._workers)] if p is not None]
        self._wait(
            lambda: len(self.alive_workers()) >= count,
            f"{count} ALIVE workers at {self.master_webui_url}/json/",
            watched,
        )

    def _wait(self, ready: Callable[[], bool], what: str, watched: list[ProcessInfo]) -> None:
        deadline = time.monotonic() + self.config.start_timeout_s
        while True:
            if ready():
                return
            for proc in watched:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(proc.pid, os.WNOHANG)  # reap our child if it died
                if not proc.alive():
                    raise ClusterError(
                        f"{proc.name} exited while waiting for {what}: see {proc.log}"
                    )
            if time.monotonic() > deadline:
                logs = ", ".join(p.log for p in watched)
                raise ClusterError(
                    f"timed out after {self.config.start_timeout_s:g}s waiting for {what}: "
                    f"see {logs}"
                )
            time.sleep(0.2)

    # -- what runs -----------------------------------------------------------------------------

    def _master_json(self) -> dict[str, Any] | None:
        if self.master is None:
            return None
        try:
            with urllib.request.urlopen(f"{self.master_webui_url}/json/", timeout=2) as resp:
                return dict(json.load(resp))
        except (OSError, ValueError, urllib.error.URLError):
            return None

    def master_status(self) -> dict[str, Any] | None:
        """The master's ``/json/`` document (workers, apps), or None if it does not answer."""
        return self._master_json()

    def alive_workers(self) -> list[dict[str, Any]]:
        """The master's ALIVE workers (its JSON entries; ``webuiaddress`` names the worker)."""
        status = self._master_json() or {}
        return [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]

    def alive_worker_indexes(self) -> list[int]:
        """Indexes of this cluster's workers that the master lists ALIVE."""
        addresses = {w.get("webuiaddress") for w in self.alive_workers()}
        return [w.index for w in self._workers if f"http://{LOOPBACK}:{w.webui_port}" in addresses]

    def processes(self) -> list[int]:
        """Every live process of this cluster: each recorded process group and everything
        carrying the cluster's marker (executors, Python daemons and workers included)."""
        found: set[int] = set()
        for proc in self._recorded():
            found.update(_group_of(proc))
        root = str(self.base_dir) + "/"
        found.update(_marked(lambda role: role.startswith(root)))
        return sorted(found)

    def worker_processes(self, index: int) -> list[int]:
        """Live processes of worker ``index``: its group and its marked descendants."""
        worker = self._worker(index)
        found = set(_group_of(worker))
        role = str(self.worker_dir(index))
        found.update(_marked(lambda value: value == role))
        return sorted(found)

    def status(self) -> dict[str, Any]:
        """What runs, for ``statekeeper cluster status``."""
        alive = set(self.alive_worker_indexes()) if self.master is not None else set()
        master_alive = self.master is not None and self.master.alive()
        workers = [
            {
                **w.to_json(),
                "alive": w.alive(),
                "registered": w.index in alive,
                "webui_url": f"http://{LOOPBACK}:{w.webui_port}",
            }
            for w in self._workers
        ]
        for entry in workers:
            entry["frozen"] = entry["index"] in self._frozen
        return {
            "base_dir": str(self.base_dir),
            "running": master_alive and len(alive) == len(self._workers) > 0,
            "master_url": self.master_url if self._master_port else None,
            "master_webui_url": self.master_webui_url if self.master is not None else None,
            "master_pid": self.master.pid if self.master is not None else None,
            "master_alive": master_alive,
            "workers": workers,
            "alive_workers": len(alive),
            "logs": str(self.base_dir / "logs"),
            "state_file": str(self.state_file),
        }

    # -- failures and restarts -----------------------------------------------------------------

    def _worker(self, index: int) -> WorkerInfo:
        if not 0 <= index < len(self._workers):
            raise ClusterError(f"no worker {index}: the cluster has {len(self._workers)}")
        return self._workers[index]

    def kill_worker(self, index: int, signal: int = signals.SIGKILL) -> list[int]:
        """Send ``signal`` to worker ``index``'s process group (the worker JVM and its
        executor JVMs) and to every process carrying its marker (the executors' pyspark
        daemons and Python workers, which pyspark puts in a process group of their own); with
        SIGKILL, wait until they are gone. A frozen worker (:meth:`freeze_worker`) is no
        longer frozen afterwards: SIGKILL ends stopped processes, any other signal is
        followed by SIGCONT so that they handle it. Returns the pids signalled."""
        victims = sorted(set(self.worker_processes(index)) | set(self._frozen_pids(index)))
        worker = self._worker(index)
        if worker.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(worker.pid, signal)
        _signal_pids(victims, signal)
        if signal not in (signals.SIGKILL, signals.SIGSTOP) and index in self._frozen:
            # A stopped process keeps any other signal pending until it runs again.
            _signal_pids(victims, signals.SIGCONT)
        if signal != signals.SIGSTOP and self._frozen.pop(index, None) is not None:
            self._write_state()
        if signal == signals.SIGKILL:
            _wait_gone(victims, self.config.stop_timeout_s)
        return victims

    def freeze_worker(self, index: int) -> list[int]:
        """SIGSTOP every process of worker ``index``'s "host": its process group (the worker
        JVM, the executor JVMs) and every process carrying its marker (the pyspark daemons
        and Python workers, in a group of their own), as :meth:`kill_worker` finds them. A
        process forked while they are being stopped is found and stopped in a next round.
        The processes keep their sockets, locks and memory; nothing in them runs until
        :meth:`thaw_worker` (or :meth:`kill_worker`, :meth:`stop`). Returns the pids stopped."""
        worker = self._worker(index)
        stopped = dict(self._frozen.get(index, {}))
        if worker.alive():  # the worker JVM and its executor JVMs in one go
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(worker.pid, signals.SIGSTOP)
        for _ in range(FREEZE_ROUNDS):
            new = [pid for pid in self.worker_processes(index) if pid not in stopped]
            if not new:
                break
            _signal_pids(new, signals.SIGSTOP)
            for pid in new:
                process = ProcessIdentity.of(pid)
                if process.alive():
                    stopped[pid] = process
        else:
            left = [pid for pid in self.worker_processes(index) if pid not in stopped]
            if left:
                self._frozen[index] = stopped
                self._write_state()
                raise ClusterError(
                    f"worker {index}: processes {left} still appeared after "
                    f"{FREEZE_ROUNDS} rounds of SIGSTOP"
                )
        self._frozen[index] = stopped
        self._write_state()
        _await_stopped(stopped)
        return sorted(stopped)

    def thaw_worker(self, index: int) -> list[int]:
        """SIGCONT the processes :meth:`freeze_worker` stopped (those still running, by pid and
        start time) and every process of the worker now; they go on where they stopped.
        Returns the pids continued. A worker that is not frozen is left as it is."""
        self._worker(index)
        if index not in self._frozen:
            return []
        pids = sorted(set(self._frozen_pids(index)) | set(self.worker_processes(index)))
        _signal_pids(pids, signals.SIGCONT)
        del self._frozen[index]
        self._write_state()
        return pids

    def frozen_workers(self) -> list[int]:
        """Indexes of the workers frozen by :meth:`freeze_worker` and not thawed since."""
        return sorted(self._frozen)

    def _frozen_pids(self, index: int) -> list[int]:
        """The pids freeze_worker stopped for worker ``index`` that are still those processes."""
        return [pid for pid, process in self._frozen.get(index, {}).items() if process.alive()]

    def restart_worker(self, index: int) -> WorkerInfo:
        """Start worker ``index`` again (same directories, environment and web UI port) and
        wait until the master lists it ALIVE. The worker must be down (see kill_worker)."""
        old = self._worker(index)
        if old.alive():
            raise ClusterError(f"worker {index} (pid {old.pid}) is still running")
        worker = self._start_worker(spark_home(), index, old.webui_port)
        self._workers[index] = worker
        self._write_state()
        self._wait(
            lambda: index in self.alive_worker_indexes(),
            f"worker {index} ALIVE at {self.master_webui_url}/json/",
            [p for p in (self.master, worker) if p is not None],
        )
        return worker

    # -- stop ----------------------------------------------------------------------------------

    def stop(self) -> list[int]:
        """SIGTERM every process group (workers first, then the master), SIGKILL what is
        left after ``stop_timeout_s``. Idempotent. Returns the pids that had to be killed.

        Processes of a frozen worker (and any other stopped process of the cluster, e.g.
        frozen by another process) get SIGKILL at once: a stopped process would hold a
        SIGTERM pending until the timeout, and continuing it first would let it run on
        with its stale view (a frozen host is not shut down gracefully either)."""
        frozen = {pid for index in list(self._frozen) for pid in self._frozen_pids(index)}
        frozen |= {pid for pid in self.processes() if _is_stopped(pid)}
        if frozen:
            _signal_pids(frozen, signals.SIGKILL)
            _wait_gone(frozen, 5.0)
        self._frozen.clear()
        found = self.processes()
        for proc in [*self._workers, *([self.master] if self.master else [])]:
            if proc.alive():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signals.SIGTERM)
        _signal_pids(found, signals.SIGTERM)
        left = _wait_gone(found, self.config.stop_timeout_s)
        if left:
            _signal_pids(left, signals.SIGKILL)
            _wait_gone(left, 5.0)
        # Whatever started meanwhile (an executor forked during the stop).
        late = self.processes()
        if late:
            _signal_pids(late, signals.SIGKILL)
            _wait_gone(late, 5.0)
        self._write_state(stopped=True)
        return sorted(set(left) | set(late))

    def __enter__(self) -> LocalSparkCluster:
        if self.master is None or not self.master.alive():
            self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- the state file ------------------------------------------------------------------------

    def _recorded(self) -> list[ProcessInfo]:
        return [*([self.master] if self.master else []), *self._workers]

    def _write_state(self, *, stopped: bool = False) -> None:
        cfg = asdict(self.config)
        cfg["base_dir"] = str(self.base_dir)
        document = {
            "boot_id": boot_id(),
            "started_at": self._started_at,
            "stopped": stopped,
            "master_port": self._master_port,
            "master": self.master.to_json() if self.master else None,
            "workers": [w.to_json() for w in self._workers],
            # [pid, start ticks] pairs; the boot is the document's.
            "frozen": {
                str(i): sorted([p.pid, p.start_ticks] for p in frozen.values())
                for i, frozen in self._frozen.items()
            },
            "config": cfg,
        }
        replace_text(self.state_file, json.dumps(document, indent=2) + "\n")

    @classmethod
    def attach(cls, base_dir: Path) -> LocalSparkCluster:
        """The cluster recorded in ``<base_dir>/cluster.json`` (started by another process).
        A record from another boot keeps no process: its pids mean nothing now."""
        base_dir = Path(base_dir).absolute()
        document = _read_state(base_dir / STATE_FILE)
        if document is None:
            raise ClusterError(f"no cluster recorded in {base_dir / STATE_FILE}")
        fields = ClusterConfig.__dataclass_fields__
        config = ClusterConfig(**{k: v for k, v in document["config"].items() if k in fields})
        config.base_dir = base_dir
        cluster = cls(config)
        cluster._master_port = int(document.get("master_port") or 0)
        cluster._started_at = float(document.get("started_at") or 0.0)
        boot = document.get("boot_id")
        if boot == boot_id():
            if document.get("master"):
                cluster.master = ProcessInfo.from_json(document["master"])
            cluster._workers = [WorkerInfo.from_json(w) for w in document.get("workers", [])]
            cluster._frozen = {
                int(i): {
                    int(pid): ProcessIdentity(int(pid), int(ticks), boot) for pid, ticks in pids
                }
                for i, pids in (document.get("frozen") or {}).items()
            }
        return cluster


def _read_state(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ClusterError(f"unreadable cluster state {path}: {exc}") from exc


def _processes_of_state(document: dict[str, Any]) -> list[ProcessInfo]:
    if document.get("boot_id") != boot_id():
        return []
    found = [ProcessInfo.from_json(document["master"])] if document.get("master") else []
    return found + [WorkerInfo.from_json(w) for w in document.get("workers", [])]


def _group_of(proc: ProcessInfo) -> list[int]:
    """The live members of ``proc``'s process group: its leader runs, or is gone and what
    is left of its group is still ours; none when the pid now belongs to another process
    (see :meth:`ProcessIdentity.group_may_be_signalled`)."""
    return group_members(proc.pid) if proc.process.group_may_be_signalled() else []


def _marked(matches: Callable[[str], bool]) -> list[int]:
    """Live processes whose :data:`CLUSTER_MARKER_ENV` value ``matches``."""
    key = f"{CLUSTER_MARKER_ENV}=".encode()
    found = []
    for pid in all_pids():
        if pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        for entry in environ.split(b"\0"):
            if entry.startswith(key) and matches(entry[len(key) :].decode(errors="replace")):
                if start_ticks(pid) is not None:
                    found.append(pid)
                break
    return found


def _is_stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped by a signal (state T in ``/proc/<pid>/stat``)."""
    stat = proc_stat(pid)
    return stat is not None and stat.state == "T"


def _signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _wait_gone(pids: Iterable[int], timeout_s: float) -> list[int]:
    """Wait until ``pids`` (as they run now) have exited, reaping our own children; returns
    those still running at the deadline."""
    running = [ProcessIdentity.of(pid) for pid in pids]
    deadline = time.monotonic() + timeout_s
    while True:
        for process in running:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(process.pid, os.WNOHANG)
        left = [process.pid for process in running if process.alive()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def _await_stopped(pids: Iterable[int], timeout_s: float = FREEZE_SETTLE_S) -> None:
    """Wait (bounded) until each of ``pids`` is stopped by a signal ('T'/'t') or gone."""
    deadline = time.monotonic() + timeout_s
    waiting = list(pids)
    while waiting and time.monotonic() < deadline:
        waiting = [pid for pid in waiting if (st := proc_stat(pid)) and st.state not in "Tt"]
        if waiting:
            time.sleep(0.01)
