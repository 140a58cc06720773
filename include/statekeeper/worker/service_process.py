"""An executor's services (standbys, query server, snapshot uploads) in a process of their own.

In a Python worker the services share the GIL and the cores' time slices with the tasks:
point queries waited behind batches (p99 up to 320 ms) and slowed them. With
``executor_services_process`` the first task that needs it (standbys or a query server
asked for, or snapshots in the upload spool) and finds the host lock free starts
``python -m statekeeper.worker.service_process <spec>`` instead, and this process
hosts :class:`~statekeeper.worker.executor_services.ExecutorServicesHost` as its main work:

- the task takes the executor's host lock (an ``flock``) and hands it to the process it
  starts (an inherited descriptor), so one process hosts and no other task starts another;
  the OS frees the lock when that process dies (started by hand, it takes the lock itself,
  and exits when another process holds it);
- it gets the settings, the executor and the app's topology from the files the task wrote
  beside the lock (``services.json``, ``topology.pkl``: the topology as the task got it,
  pickled with cloudpickle, and the task's ``sys.path`` so the app's modules import);
- it is a child of the task's Python worker and keeps its environment, so it belongs to
  the executor's "host" like the workers do (a frozen host freezes it too);
- it runs at a lower priority than the tasks (``executor_services_nice``);
- it ends when the executor's JVM ends (checked every :data:`WATCH_S`; in local mode, the
  driver's JVM, the worker's nearest Java ancestor), or on SIGTERM or SIGHUP (what the
  pyspark daemon sends its process group when it shuts down), closing the services first.

The files and ``report.json`` stay the interface, as when a worker hosts the services.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from statekeeper.atomic_file import replace_text
from statekeeper.cluster.executor import ExecutorIdentity, executor_dir, java_ancestor
from statekeeper.process_identity import ProcessIdentity
from statekeeper.settings import StatekeeperSettings
from statekeeper.worker.executor_services import ExecutorServicesHost, try_host_lock
from statekeeper.worker.task_runner import settings_to_json

log = logging.getLogger("statekeeper.executor")

SPEC_FILE = "services.json"
TOPOLOGY_FILE = "topology.pkl"
LOG_FILE = "services.log"
WATCH_S = 0.5

#: A worker starts the service process at most this often: one that fails at its start
#: (a broken install, a port in use) is not started again by every task of every batch.
RESTART_AFTER_S = 5.0

#: Service processes this worker started: polled so an exited one is reaped.
_started: list[subprocess.Popen[bytes]] = []
_last_start: dict[Path, float] = {}


def start_service_process(
    settings: StatekeeperSettings, state_dir: Path, executor: ExecutorIdentity, topology: Any
) -> bool:
    """Start the executor's service process unless a process holds the host lock; True
    when one was started."""
    _started[:] = [p for p in _started if p.poll() is None]
    folder = executor_dir(state_dir, settings.application_id)
    if time.monotonic() - _last_start.get(folder, -RESTART_AFTER_S) < RESTART_AFTER_S:
        return False
    lock_fd = try_host_lock(folder)
    if lock_fd is None:
        return False
    _last_start[folder] = time.monotonic()
    try:
        _start(settings, state_dir, executor, topology, folder, lock_fd)
    finally:
        # The child holds the lock through its inherited copy of the descriptor (a flock
        # belongs to the open file, not to a process), so no other task starts one meanwhile.
        os.close(lock_fd)
    return True


def _start(
    settings: StatekeeperSettings,
    state_dir: Path,
    executor: ExecutorIdentity,
    topology: Any,
    folder: Path,
    lock_fd: int,
) -> None:
    from pyspark import cloudpickle  # the worker has it; the child only unpickles

    topology_path = folder / TOPOLOGY_FILE
    staged = topology_path.with_name(f".{TOPOLOGY_FILE}.{os.getpid()}")
    staged.write_bytes(cloudpickle.dumps(topology))
    staged.replace(topology_path)
    jvm = ProcessIdentity.of(executor.jvm_pid or java_ancestor(os.getpid()) or os.getpid())
    spec = {
        "settings": settings_to_json(settings),  # as executors get them
        "state_dir": str(state_dir),
        "executor": asdict(executor),
        "jvm": jvm.to_json(),
        "sys_path": [p for p in sys.path if p],
        "lock_fd": lock_fd,
    }
    spec_path = folder / SPEC_FILE
    replace_text(spec_path, json.dumps(spec))
    with open(folder / LOG_FILE, "ab") as out:
        _started.append(
            subprocess.Popen(
                [sys.executable, "-m", "statekeeper.worker.service_process", str(spec_path)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                close_fds=True,
                pass_fds=(lock_fd,),
            )
        )
    log.info("executor %s: service process %d started", executor.executor_id, _started[-1].pid)


def serve(spec_path: Path) -> int:
    """The service process's main: host the services until the executor's JVM ends."""
    spec = json.loads(spec_path.read_text())
    for entry in reversed(spec["sys_path"]):
        if entry not in sys.path:
            sys.path.insert(0, entry)

    settings = StatekeeperSettings.model_validate_json(spec["settings"])
    state_dir = Path(spec["state_dir"])
    executor = ExecutorIdentity(**spec["executor"])
    jvm = ProcessIdentity.from_json(spec["jvm"])
    # Started by a task: the lock came with the process. Started by hand: take it here.
    fd = spec.get("lock_fd")
    if fd is None:
        fd = try_host_lock(executor_dir(state_dir, settings.application_id))
        if fd is None:
            return 0  # another process hosts them
    os.set_inheritable(fd, False)
    # Below the tasks: a query or a standby's catch-up must not take a core a batch needs.
    os.nice(settings.executor_services_nice)
    topology_path = spec_path.with_name(TOPOLOGY_FILE)
    topology = pickle.loads(topology_path.read_bytes())  # noqa: S301 - our task wrote it
    stop = threading.Event()
    received: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    # SIGHUP: the pyspark daemon's shutdown signals its whole process group, this one too.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)
    host = ExecutorServicesHost(settings, state_dir, executor, fd, topology)
    name = executor.executor_id
    log.info("executor %s: services hosted by process %d", name, os.getpid())
    try:
        while not stop.wait(WATCH_S):
            if not jvm.alive():
                log.info("executor %s: its JVM (pid %d) ended; services stop", name, jvm.pid)
                break
        else:
            log.info("executor %s: %s; services stop", name, ", ".join(received))
    finally:
        host.close()
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    sys.exit(serve(Path(sys.argv[1])))
