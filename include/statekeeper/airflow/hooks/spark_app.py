"""Launch a statekeeper app detached through the Spark provider's ``spark-submit``.

The provider's ``SparkSubmitHook.submit()`` blocks until spark-submit exits (for a
streaming app in client mode: its whole lifetime), holding an Airflow worker slot. Here the
hook only *builds* the command (master and deploy mode from the ``spark_default``
connection, ``--conf``, ``--name``, application and arguments); the process is started in a
new session with its output in a log file, and the task moves on.

The app's Spark session honours spark-submit's ``--master`` (``StatekeeperApp._spark`` sets
``settings.spark_master`` only when spark-submit gave none), so the connection decides
where the app runs: ``local[N]`` embedded, ``spark://host:7077`` on a cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from statekeeper.airflow.hooks.app import StatekeeperAppHook
from statekeeper.airflow.supervision.process import AppProcessIdentity
from statekeeper.errors import ConfigError

#: The generic entry point (an app folder without its own app.py uses it with --spec).
LAUNCHER = Path(__file__).resolve().parents[2] / "app" / "launcher.py"


def entry_point(spec_path: str | Path) -> Path:
    """``app.py`` beside the spec (``spark_apps/<app>/app.py``), else the generic launcher."""
    beside = Path(spec_path).resolve().with_name("app.py")
    return beside if beside.is_file() else LAUNCHER


class StatekeeperSparkAppHook(StatekeeperAppHook):
    """The app of ``spec_path`` launched with spark-submit on ``conn_id``'s master.

    ``settings_overrides`` go to the app as ``--set key=value`` (and are resolved here too,
    so the hook knows the app's status file); ``extra_overrides`` (e.g. a one-off
    ``restore_from_snapshots``) go only to this launch.
    """

    def __init__(
        self,
        spec_path: str,
        settings_overrides: dict[str, Any] | None = None,
        conn_id: str = "spark_default",
    ) -> None:
        super().__init__(spec_path, settings_overrides)
        self.conn_id = conn_id

    def submit_hook(self, extra_overrides: dict[str, Any] | None = None) -> SparkSubmitHook:
        """The provider's hook for this app (connection, name, application arguments)."""
        args = ["--spec", str(Path(self.spec_path).resolve())]
        for key, value in {**self.settings_overrides, **(extra_overrides or {})}.items():
            text = value if isinstance(value, str) else json.dumps(value)
            args += ["--set", f"{key}={text}"]
        return SparkSubmitHook(
            conn_id=self.conn_id,
            name=f"statekeeper-{self.application_id}",
            application_args=args,
        )

    def command(self, extra_overrides: dict[str, Any] | None = None) -> list[str]:
        """The spark-submit command line, its binary resolved to a full path."""
        hook = self.submit_hook(extra_overrides)
        # The provider builds the command only inside submit() (which also runs it, blocking):
        # its builder is the one piece reused here.
        cmd = hook._build_spark_submit_command(str(entry_point(self.spec_path)))
        cmd[0] = _resolve_binary(cmd[0])
        return cmd

    def launch_env(self) -> dict[str, str]:
        """The app's environment: this one plus what Spark's processes need (loopback,
        this interpreter for the driver and workers, the package on PYTHONPATH)."""
        from statekeeper.spark.session_env import PACKAGE_ROOT

        env = dict(os.environ)
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        env.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        env["PYTHONPATH"] = os.pathsep.join(
            [PACKAGE_ROOT, *[p for p in paths if p != PACKAGE_ROOT]]
        )
        env.pop("PYSPARK_SUBMIT_ARGS", None)  # for pyspark-launched JVMs, not spark-submit
        env.pop("STATEKEEPER_DIE_WITH_PARENT", None)  # detached: outlives the task
        return env

    def launch(
        self,
        log_dir: str | Path | None = None,
        extra_overrides: dict[str, Any] | None = None,
        upgrade_mode: str | None = None,
    ) -> AppProcessIdentity:
        """Start the app detached (own session and process group, output to a log file,
        stdin closed) and return its identity. Does not wait for it."""
        settings = self.settings
        folder = Path(log_dir or Path(settings.state_dir) / settings.application_id / "logs")
        folder.mkdir(parents=True, exist_ok=True)
        launched_at = time.time()
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(launched_at))
        log_path = folder / f"app-{stamp}.{int(launched_at * 1000) % 1000:03d}.log"
        cmd = self.command(extra_overrides)
        self.log.info("launching %s detached: %s (log %s)", self.application_id, cmd, log_path)
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                env=self.launch_env(),
            )
        # The Popen object is dropped: the app outlives it (subprocess reaps it if it exits
        # while this process lives; liveness checks treat a zombie as gone).
        return AppProcessIdentity.of_launched(
            self.application_id,
            proc.pid,
            launched_at,
            str(log_path),
            str(settings.status_path().absolute()),
            cmd,
            upgrade_mode,
        )


def _resolve_binary(binary: str) -> str:
    """``spark-submit`` from PATH, else beside this interpreter (the venv's pyspark)."""
    found = shutil.which(binary) or shutil.which(binary, path=str(Path(sys.executable).parent))
    if found is None:
        raise ConfigError(
            f"spark binary {binary!r} (the Spark connection's spark-binary) is neither on PATH "
            f"nor in {Path(sys.executable).parent}"
        )
    return found
