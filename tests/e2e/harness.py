"""Helpers for the end-to-end tests: run a shipped app under kill -9, then read what it left."""

from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from statekeeper.app.spec import AppSpec, load_app_spec
from statekeeper.errors import StatekeeperError
from statekeeper.testing.app_process import AppProcess, spark_app_spec

STARTED = ("RESTORING", "RUNNING")


def series_seed(series: str, kills: int, knob: str) -> int:
    """The random seed of a kill series (``STATEKEEPER_E2E_SEED``, else a new one), printed
    with how to run the series again."""
    seed = int(os.environ.get("STATEKEEPER_E2E_SEED", random.randrange(1 << 30)))
    print(
        f"{series} seed {seed}, {kills} kills (rerun with STATEKEEPER_E2E_SEED={seed} "
        f"{knob}={kills})"
    )
    return seed


@dataclass
class AppUnderTest:
    """A shipped app spec re-targeted at unique topics, state and checkpoint directories."""

    name: str
    spec_path: Path
    spec: AppSpec
    overrides: dict[str, Any]
    workdir: Path
    kills: list[dict[str, Any]] = field(default_factory=list)
    dropped_at: int | None = None  # the run after which a task directory was deleted

    @classmethod
    def create(
        cls,
        name: str,
        bootstrap: str,
        workdir: Path,
        suffix: str,
        params: dict[str, str],
        **settings: Any,
    ) -> AppUnderTest:
        base = load_app_spec(spark_app_spec(name))
        raw = base.model_dump()
        raw["application_id"] = f"{base.application_id}-{suffix}"
        raw["params"] = {**raw["params"], **params}
        spec_path = workdir / f"{name}.yaml"
        workdir.mkdir(parents=True, exist_ok=True)
        spec_path.write_text(yaml.safe_dump(raw))
        overrides = {
            "bootstrap_servers": bootstrap,
            "state_dir": str(workdir / "state"),
            "checkpoint_dir": str(workdir / "checkpoints"),
            "status_file": str(workdir / "status.json"),
            "status_port": None,
            "lock_timeout_s": 60,
            **settings,
        }
        return cls(name, spec_path, load_app_spec(spec_path), overrides, workdir)

    @property
    def app_id(self) -> str:
        return self.spec.application_id

    @property
    def settings(self) -> Any:
        return self.spec.resolved_settings(**self.overrides)

    def cli_args(self) -> list[str]:
        """``--app SPEC --set name=value ...``: this app as a ``statekeeper`` command takes it."""
        args = ["--app", str(self.spec_path)]
        for key, value in self.overrides.items():
            args += ["--set", f"{key}={value if isinstance(value, str) else json.dumps(value)}"]
        return args

    def process(self, run: int, **kwargs: Any) -> AppProcess:
        return AppProcess(self.spec_path, self.overrides, self.workdir / f"run{run}.log", **kwargs)

    def kill_at_random_moments(
        self,
        runs: int,
        rng: random.Random,
        *,
        max_delay_s: float = 2.0,
        before: Callable[[int], None] | None = None,
        between: Callable[[int], None] | None = None,
    ) -> None:
        """Start the app ``runs`` times and kill -9 it at a random moment each time.

        Half the kills after the first run (at random) land while the run's first micro-batch
        executes (restore, processing, commit); the others after 1-3 completed batches plus a
        random delay,
        so the app also makes progress between kills. ``before(run)`` can feed more input.
        A run that drains its input and exits before its kill moment is recorded as such.
        """
        for run in range(runs):
            if before is not None:
                before(run)
            proc = self.process(run).start()
            # The first run always completes two batches, so every task has a directory to
            # lose: a repartitioned stage's tasks get their input a batch after the source
            # stage (three early kills in a row left none at 3 kills per app; one batch
            # then an early kill left none at 2).
            early = rng.random() < 0.5 and run > 0
            batches = 0 if early else rng.randint(2 if run == 0 else 1, 3)
            delay = rng.uniform(0.0, max_delay_s)
            try:
                if early:
                    proc.wait_for(lambda s: s.get("state") in STARTED, 300)
                else:
                    proc.wait_for(lambda s, n=batches: _batches_done(s) >= n, 300)
                time.sleep(delay)
                outcome = "killed"
            except StatekeeperError:
                if proc.proc is None or proc.proc.returncode != 0:
                    raise
                outcome = "finished before the kill"
            finally:
                last = (proc.status() or {}).get("last_batch") or {}
                proc.kill9()
            self.kills.append(
                {
                    "run": run,
                    "after_batches": batches,
                    "delay_s": round(delay, 3),
                    "outcome": outcome,
                    "last_batch": last,
                }
            )
            if between is not None:
                between(run)

    def run_to_completion(self, run: int, timeout_s: float = 400) -> dict[str, Any]:
        proc = self.process(run).start()
        code = proc.wait(timeout_s)
        log = (self.workdir / f"run{run}.log").read_text()[-4000:]
        assert code == 0, f"final run exited {code}:\n{log}"
        status = proc.status()
        assert status is not None and status["state"] == "NOT_RUNNING", status
        return status

    def remove_task_dir(self, task_id: str) -> bool:
        """Delete one task's state directory; False if the task has no state yet."""
        path = Path(self.overrides["state_dir"]) / self.app_id / task_id
        if not path.exists():
            return False
        shutil.rmtree(path)
        return True


def _batches_done(status: dict[str, Any]) -> int:
    """Micro-batches completed by this run (each run starts a fresh status file)."""
    return int((status.get("throughput") or {}).get("batches", 0))
