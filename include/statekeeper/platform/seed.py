"""Input for the shipped apps on a fresh platform broker, so the apps the DAGs launch have
something to process (an app refuses to start without its source topics).

Each shipped app whose spec names a generator (``generator:``) is seeded with
``statekeeper generate --app <spec>`` (the generator's defaults: a deterministic data set
ending about now) each time ``up`` starts the (in-memory) broker.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from statekeeper.app.spec_discovery import peek_field, spec_files
from statekeeper.errors import StatekeeperError
from statekeeper.platform.layout import PlatformConfig


def apps_to_seed(config: PlatformConfig) -> list[Path]:
    """The specs of the shipped apps that name a generator; none when the specs dir is not
    the repo's spark_apps/ (only the shipped apps' input is made up)."""
    if config.apps_specs_dir != config.repo / "spark_apps":
        return []
    return [path for path in spec_files(config.apps_specs_dir) if peek_field(path, "generator")]


class Seeding:
    """The generators of the apps of ``specs``, run one after the other in a background
    thread while Airflow starts (two idempotent producers at once made the embedded broker
    fail one with a fatal producer error). An app is named by its folder (``word_count``)."""

    def __init__(self, config: PlatformConfig, env: dict[str, str], specs: list[Path]) -> None:
        self.config = config
        self.env = env
        self.specs = specs
        self.apps = [spec.parent.name for spec in specs]
        self.done: list[str] = []
        self.failure: str | None = None
        self._thread = threading.Thread(target=self._run, name="seed-inputs", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        statekeeper = str(Path(sys.executable).with_name("statekeeper"))
        for app, spec in zip(self.apps, self.specs, strict=True):
            log = self.config.log_file(f"seed-{app}")
            with open(log, "ab") as out:
                code = subprocess.run(
                    [statekeeper, "generate", "--app", str(spec)]
                    + ["--bootstrap", self.config.bootstrap_servers, "--no-progress", "--json"],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    timeout=120,
                    check=False,
                ).returncode
            if code != 0:
                self.failure = f"seeding {app} failed (exit {code}); see {log}"
                return
            self.done.append(app)

    def finish(self, timeout_s: float) -> list[str]:
        """Wait for the generators; returns the apps seeded, raises naming the log of a
        failure."""
        self._thread.join(max(timeout_s, 1.0))
        if self._thread.is_alive():
            raise StatekeeperError(f"seeding {self.apps} did not finish in time")
        if self.failure:
            raise StatekeeperError(self.failure)
        return list(self.done)
