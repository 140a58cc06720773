"""Input for the shipped apps on a fresh platform broker, so the apps the DAGs launch have
something to process (an app refuses to start without its source topics).

Each app folder of the specs dir with a spec and a ``generator.py`` is seeded with
``statekeeper generate <app>`` (its defaults: a deterministic data set ending about now)
each time ``up`` starts the (in-memory) broker.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from statekeeper.errors import StatekeeperError
from statekeeper.platform.layout import PlatformConfig

SPEC_SUFFIXES = (".yaml", ".yml", ".toml")


def apps_to_seed(config: PlatformConfig) -> list[str]:
    """Shipped app folders (a spec and a generator.py); none when the specs dir is not the
    repo's spark_apps/ (the generators live there)."""
    if config.apps_specs_dir != config.repo / "spark_apps":
        return []
    folders = sorted(g.parent for g in config.apps_specs_dir.glob("*/generator.py"))
    return [app.name for app in folders if any(p.suffix in SPEC_SUFFIXES for p in app.iterdir())]


class Seeding:
    """The generators of ``apps``, run one after the other in a background thread while
    Airflow starts (two idempotent producers at once made the embedded broker fail one with
    a fatal producer error)."""

    def __init__(self, config: PlatformConfig, env: dict[str, str], apps: list[str]) -> None:
        self.config = config
        self.env = env
        self.apps = apps
        self.done: list[str] = []
        self.failure: str | None = None
        self._thread = threading.Thread(target=self._run, name="seed-inputs", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        statekeeper = str(Path(sys.executable).with_name("statekeeper"))
        for app in self.apps:
            log = self.config.log_file(f"seed-{app}")
            with open(log, "ab") as out:
                code = subprocess.run(
                    [statekeeper, "generate", app, "--bootstrap", self.config.bootstrap_servers]
                    + ["--no-progress", "--json"],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self.env,
                    # `statekeeper generate` imports the generator from ./spark_apps.
                    cwd=self.config.apps_specs_dir.parent,
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
