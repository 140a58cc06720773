"""An app run as a child process: start it, watch its status file, kill -9 it.

Used by the demos (``make demo``), the end-to-end fault tests and the benchmarks. The child
gets its own process group, so ``kill9`` takes down the Spark JVM and every Python worker at
once — what a machine failure looks like.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from statekeeper.app.child_process import child_env
from statekeeper.app.spec_discovery import DEFAULT_SPECS_DIR
from statekeeper.errors import StatekeeperError

#: The repository's shipped apps (``spark_apps/``, beside ``include/``: a checkout or an
#: editable install).
SPARK_APPS = DEFAULT_SPECS_DIR


def spark_app_spec(name: str) -> Path:
    """The spec shipped in ``spark_apps/<name>/`` of the repository."""
    folder = SPARK_APPS / name
    specs = sorted(folder.glob("*.yaml")) + sorted(folder.glob("*.toml"))
    if not specs:
        raise StatekeeperError(f"no app spec found in {folder}")
    return specs[0]


class AppProcess:
    """One launch of an app spec in a child process with settings overrides."""

    def __init__(
        self,
        spec: Path,
        overrides: dict[str, Any],
        log_path: Path,
        *,
        stop_when_idle: bool = True,
    ) -> None:
        if "status_file" not in overrides:
            raise StatekeeperError("AppProcess needs a status_file override to watch the app")
        self.spec = spec
        self.overrides = overrides
        self.status_file = Path(overrides["status_file"])
        self.log_path = log_path
        self.stop_when_idle = stop_when_idle
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> AppProcess:
        self.status_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "statekeeper.app.launcher", "--spec", str(self.spec)]
        for key, value in self.overrides.items():
            cmd += ["--set", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
        if self.stop_when_idle:
            cmd.append("--stop-when-idle")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=child_env(),  # the app dies with this process, even by kill -9
            )
        return self

    def status(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.status_file.read_text())
        except (OSError, ValueError):
            return None

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout_s: float
    ) -> dict[str, Any]:
        """Poll the status file until ``predicate(status)``; fail if the app exits first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            status = self.status()
            if status is not None and predicate(status):
                return status
            if self.proc is not None and self.proc.poll() is not None:
                raise StatekeeperError(
                    f"app exited with {self.proc.returncode} before the awaited status; "
                    f"see {self.log_path}"
                )
            time.sleep(0.1)
        raise StatekeeperError(
            f"app status not reached within {timeout_s:.0f}s; see {self.log_path}"
        )

    def kill9(self) -> None:
        """SIGKILL the whole process group (driver JVM, Python workers)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):  # already gone
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self) -> None:
        """SIGTERM the driver: it finishes the running batch, commits and exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait(self, timeout_s: float) -> int:
        if self.proc is None:
            raise StatekeeperError("app not started")
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise StatekeeperError(
                f"app did not finish within {timeout_s:.0f}s (killed); see {self.log_path}"
            ) from None
