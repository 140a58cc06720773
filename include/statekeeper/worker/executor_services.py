"""What an executor runs beside its tasks: standby replicas and the query server (and, in a
service process of its own, the snapshot uploads: :mod:`~statekeeper.worker.upload_spool`).

Spark gives an executor several Python workers and no place of its own to run a service, so
one of the executor's Python workers hosts them: the first to take the executor's host lock
(``<state_dir>/<app>/.executor/host.lock``, an ``flock`` the OS frees when that process
dies; the next Spark task on the executor then starts them again). Every Spark task of a
batch writes the driver's latest :class:`~statekeeper.placement.assignment.Assignment` to
``assignment.json`` there; the host reads it and hands it to its components, and writes
what they report (standby lag, the query port) to ``report.json``, which Spark tasks send
back to the driver with their results. Files, not sockets, because the host may be any of
the executor's Python workers.

A component is any object with ``reconcile(assignment)``, ``report() -> dict`` and
``close()``; :func:`_components` builds those the settings ask for.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from statekeeper.atomic_file import replace_text
from statekeeper.cluster.executor import ExecutorIdentity, executor_dir
from statekeeper.placement.assignment import Assignment
from statekeeper.placement.published import read_assignment
from statekeeper.settings import StatekeeperSettings

log = logging.getLogger("statekeeper.executor")

POLL_S = 0.2
REPORT_EVERY_S = 0.5


class ExecutorComponent(Protocol):
    """A long-running part of an executor (standby replicas, the query server)."""

    def reconcile(self, assignment: Assignment) -> None: ...

    def report(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


def read_report(state_dir: Path, application_id: str) -> dict[str, Any] | None:
    """The executor host's last report (None before its first)."""
    try:
        return json.loads((executor_dir(state_dir, application_id) / "report.json").read_text())
    except (OSError, ValueError):
        return None


def _components(
    settings: StatekeeperSettings, state_dir: Path, executor: ExecutorIdentity, topology: Any
) -> dict[str, ExecutorComponent]:
    parts: dict[str, ExecutorComponent] = {}
    standbys: Any = None
    if settings.num_standby_replicas > 0:
        from statekeeper.standby.executor_standbys import StandbyReplicas

        standbys = StandbyReplicas(
            settings,
            state_dir,
            executor,
            topology=topology,
            installer_for=_snapshot_installer_for(settings, Path(state_dir)),
        )
        parts["standbys"] = standbys
    if settings.query_port is not None:
        from statekeeper.query.server import QueryServer

        def standby_lag(task_id: str) -> int | None:
            task = standbys.task(task_id) if standbys is not None else None
            if task is None:
                return None
            lags = [n for n in (task.status().get("lag") or {}).values() if n is not None]
            return sum(lags) if lags else None

        parts["query"] = QueryServer(
            settings, state_dir, executor, topology=topology, standby_lag=standby_lag
        )
    if settings.executor_services_process:  # else each worker uploads its own snapshots
        from statekeeper.worker.upload_spool import SpoolUploader

        parts["uploads"] = SpoolUploader(settings, state_dir)
    return parts


def _snapshot_installer_for(
    settings: StatekeeperSettings, state_dir: Path
) -> Callable[[str, int], Any] | None:
    """A new standby copy starts from the newest verified snapshot, as an active restore
    does (invariant 4), so it replays only the changelog after it; None when restores from
    snapshots are off."""
    from statekeeper.worker.task_snapshots import restores_from_snapshots

    if not restores_from_snapshots(settings):
        return None
    from statekeeper.snapshots.install import installer_for
    from statekeeper.snapshots.storage import storage_for

    local = settings.model_copy(update={"state_dir": state_dir})
    storage: list[Any] = []  # made at the first use: creating it may touch object storage

    def opened() -> Any:
        if not storage:
            storage.append(storage_for(settings, create=True))
        return storage[0]

    def for_task(task_id: str, partition: int) -> Any:
        # A storage that fails leaves the copy to a full replay (in the report's note).
        return installer_for(local, opened, task_id, partition, replay_on_storage_error=True)

    return for_task


class ExecutorServicesHost:
    """The executor's standbys and query server, run by the one Python worker holding the
    host lock (see the module docstring)."""

    def __init__(
        self,
        settings: StatekeeperSettings,
        state_dir: Path,
        executor: ExecutorIdentity,
        lock_fd: int,
        topology: Any = None,
    ) -> None:
        self.settings = settings
        self.state_dir = Path(state_dir)
        self.executor = executor
        self._lock_fd = lock_fd
        self._stop = threading.Event()
        self.components = _components(settings, self.state_dir, executor, topology)
        self._version = -1
        self._run_id: str | None = None
        self._thread = threading.Thread(
            target=self._loop, name="statekeeper-executor-services", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        reported = 0.0
        while not self._stop.is_set():
            try:
                assignment = read_assignment(self.state_dir, self.settings.application_id)
                if assignment is not None and (assignment.run_id, assignment.version) != (
                    self._run_id,
                    self._version,
                ):
                    for component in self.components.values():
                        component.reconcile(assignment)
                    self._run_id, self._version = assignment.run_id, assignment.version
                if time.monotonic() - reported >= REPORT_EVERY_S:
                    self._write_report()
                    reported = time.monotonic()
            except Exception:  # a component's failure must not end the loop
                log.exception("executor services: reconcile/report failed")
            self._stop.wait(POLL_S)

    def report(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "executor": self.executor.executor_id,
            "host": self.executor.host,
            "pid": os.getpid(),
            "updated": time.time(),
            "assignment_version": self._version,
        }
        for name, component in self.components.items():
            doc[name] = component.report()
        return doc

    def _write_report(self) -> None:
        folder = executor_dir(self.state_dir, self.settings.application_id)
        replace_text(folder / "report.json", json.dumps(self.report(), sort_keys=True))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for component in self.components.values():
            try:
                component.close()
            except Exception:
                log.exception("executor services: close failed")
        os.close(self._lock_fd)


def try_host_lock(folder: Path) -> int | None:
    """The executor's host lock (``folder/host.lock``) as an open descriptor, when no other
    process holds it; None when one does. Not inherited by child processes unless passed."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / "host.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    os.set_inheritable(fd, False)
    return fd


_HOSTS: dict[tuple[str, str], ExecutorServicesHost] = {}
_HOSTS_LOCK = threading.Lock()


def ensure_executor_services(
    settings: StatekeeperSettings,
    state_dir: Path,
    executor: ExecutorIdentity,
    topology: Any = None,
    *,
    uploads: bool = False,
) -> ExecutorServicesHost | None:
    """Start this executor's services here unless another process hosts them; returns the
    host when it is this process. With ``executor_services_process`` they start in a process
    of their own instead (:mod:`statekeeper.worker.service_process`), which also uploads the
    snapshots, and this returns None. A no-op when the settings ask for neither standbys nor
    a query server, unless ``uploads`` (snapshots wait in the spool for that process)."""
    wanted = settings.num_standby_replicas > 0 or settings.query_port is not None
    if settings.executor_services_process:
        if wanted or uploads:
            from statekeeper.worker.service_process import start_service_process

            start_service_process(settings, Path(state_dir), executor, topology)
        return None
    if not wanted:
        return None
    key = (str(state_dir), settings.application_id)
    with _HOSTS_LOCK:
        if key in _HOSTS:
            return _HOSTS[key]
        fd = try_host_lock(executor_dir(state_dir, settings.application_id))
        if fd is None:
            return None
        host = ExecutorServicesHost(settings, state_dir, executor, fd, topology)
        _HOSTS[key] = host
        log.info("executor %s: services hosted by pid %d", executor.executor_id, os.getpid())
        return host


def close_executor_services() -> None:
    """Stop the services this process hosts (tests; a worker that stops hosting)."""
    with _HOSTS_LOCK:
        hosts = list(_HOSTS.values())
        _HOSTS.clear()
    for host in hosts:
        host.close()
