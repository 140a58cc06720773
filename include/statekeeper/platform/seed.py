"""Input for the shipped apps on a fresh platform broker, so the apps the DAGs launch have
something to process (an app refuses to start without its source topics).

Each app folder of the specs dir with a ``generator.py`` is seeded once per broker data dir
with ``statekeeper generate <app>`` (its defaults: a deterministic data set ending about
now); ``broker-data/.statekeeper-seeded.json`` records which apps were, so a later ``up``
(the topics survive ``down``) produces nothing twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

from statekeeper.errors import StatekeeperError
from statekeeper.platform.layout import PlatformConfig

SEEDED_FILE = ".statekeeper-seeded.json"
SPEC_SUFFIXES = (".yaml", ".yml", ".toml")


class Seeding:
    """The generators of the apps to seed, run one after the other in a background thread
    (two idempotent producers at once made the embedded broker fail one with a fatal
    producer error)."""

    def __init__(self, config: PlatformConfig, env: dict[str, str]) -> None:
        self.config = config
        self.env = env
        self.apps = apps_to_seed(config)
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
        """Wait for the generators and record the seeded apps; raises naming the log of a
        failure."""
        self._thread.join(max(timeout_s, 1.0))
        if self.done:
            seeded = _seeded(self.config) + self.done
            (self.config.broker_data_dir / SEEDED_FILE).write_text(json.dumps(seeded) + "\n")
        if self._thread.is_alive():
            raise StatekeeperError(f"seeding {self.apps} did not finish in time")
        if self.failure:
            raise StatekeeperError(self.failure)
        return list(self.done)


def apps_to_seed(config: PlatformConfig) -> list[str]:
    """Shipped app folders (a spec and a generator.py) not seeded on this broker yet; none
    when the specs dir is not the repo's spark_apps/ (the generators live there)."""
    if config.apps_specs_dir != config.repo / "spark_apps":
        return []
    done = set(_seeded(config))
    folders = sorted(g.parent for g in config.apps_specs_dir.glob("*/generator.py"))
    return [
        app.name
        for app in folders
        if any(p.suffix in SPEC_SUFFIXES for p in app.iterdir()) and app.name not in done
    ]


def _seeded(config: PlatformConfig) -> list[str]:
    try:
        return list(json.loads((config.broker_data_dir / SEEDED_FILE).read_text()))
    except (FileNotFoundError, ValueError):
        return []
