"""End to end: ``statekeeper backfill --input PATH --local`` killed with kill -9, run again.

word_count's history as newline-delimited JSON (keys spread the lines over the 4 source
partitions; the words are re-keyed through the repartition topic in memory). The fill runs
as a child process (its own process group) and is killed ``STATEKEEPER_DATASET_KILLS``
times (2; 6 in ``make test-chaos``) at a random moment of the stateful stage, after a
random number of tasks finished. Each kill leaves some tasks committed and one part way (its
changelog written, no markers). The last run goes to the end: every task either left as it
was or filled again, and the store equals the reference recomputation of the dataset, each
line counted once; the takeover record is final, at the log start.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from spark_apps.word_count.generator import word_count_lines
from spark_apps.word_count.reference import recompute
from statekeeper.app.child_process import child_env
from statekeeper.app.store_reader import read_store
from statekeeper.generate.producer import produce
from statekeeper.kafka.model import KafkaRecord
from statekeeper.versions.recorded import state_root
from statekeeper.versions.takeover import read_takeover, takeover_path
from tests.e2e.harness import AppUnderTest, series_seed

_CHAOS = int(os.environ.get("STATEKEEPER_E2E_KILLS", "2")) >= 10
KILLS = int(os.environ.get("STATEKEEPER_DATASET_KILLS", "6" if _CHAOS else "2"))
PARTITIONS = 4
LINES = 40_000

# ~20 s: make test-chaos only (make test keeps tests/spark/test_dataset_backfill.py).
pytestmark = [pytest.mark.e2e, pytest.mark.chaos, pytest.mark.timeout(max(300, 60 * (KILLS + 2)))]


def _command(app: AppUnderTest, dataset: Path) -> list[str]:
    cmd = [sys.executable, "-m", "statekeeper.cli", "backfill", *app.cli_args()]
    return [*cmd, "--input", str(dataset), "--local", "--json"]


def _run(app: AppUnderTest, dataset: Path, run: int) -> tuple[subprocess.Popen[bytes], Path]:
    log = app.workdir / f"fill{run}.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            _command(app, dataset),
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
            env=child_env(),
        )
    return proc, log


def _tasks_done(log: Path) -> int:
    try:
        return sum(": task " in line for line in log.read_text().splitlines())
    except OSError:
        return 0


def test_a_dataset_backfill_killed_then_run_again_is_exact(broker, tmp_path) -> None:
    seed = series_seed("dataset-backfill", KILLS, "STATEKEEPER_DATASET_KILLS")
    rng = random.Random(seed)
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    topic = f"dsk-lines-{suffix}"
    produce(bootstrap, topic, list(word_count_lines(200, seed=2)), partitions=PARTITIONS)
    history = [r for r in word_count_lines(LINES, seed=seed % 1000) if _utf8(r.value)]
    dataset = tmp_path / "history.jsonl"
    with dataset.open("w") as out:
        for n, r in enumerate(history):
            row = {"key": f"k{n}", "value": _utf8(r.value), "timestamp": r.timestamp_ms}
            out.write(json.dumps(row) + "\n")
    app = AppUnderTest.create(
        "word_count",
        bootstrap,
        tmp_path / "wc",
        suffix,
        {"input_topic": topic, "output_topic": f"dsk-counts-{suffix}"},
    )
    kills = []
    for run in range(KILLS):
        proc, log = _run(app, dataset, run)
        # Tasks finished before the kill: the stateless stage's, then some stateful ones.
        after = rng.randint(PARTITIONS - 1, 2 * PARTITIONS - 2)
        deadline = time.monotonic() + 120
        while proc.poll() is None and _tasks_done(log) < after and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rng.uniform(0.0, 0.4))
        finished = proc.poll() is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        if proc.stdout is not None:
            proc.stdout.close()
        assert not finished or proc.returncode == 0, log.read_text()[-3000:]
        kills.append({"run": run, "after_tasks": after, "tasks_done": _tasks_done(log)})
        if run == 0 and not finished:  # another dataset may not finish this one's fill
            copy = tmp_path / "another.jsonl"
            copy.write_text(dataset.read_text())
            other = subprocess.run(
                _command(app, copy), capture_output=True, env=child_env(), timeout=120
            )
            assert other.returncode == 2, other.stderr.decode()[-2000:]
            assert b"did not finish: run it again with that dataset" in other.stderr
    proc, log = _run(app, dataset, KILLS)
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, log.read_text()[-3000:]
    report = json.loads(out)
    notes = {t["task"]: t["note"] for t in report["tasks"]}
    print(json.dumps({"seed": seed, "kills": kills, "last_run_notes": notes}))

    records = [KafkaRecord("dataset", 0, n, 0, None, r.value) for n, r in enumerate(history)]
    topology = app.spec.build_topology()
    counts = read_store(app.settings, topology, "word-counts", PARTITIONS)
    assert counts == recompute(records).counts
    takeover = read_takeover(takeover_path(state_root(app.settings.state_dir, app.app_id)))
    assert takeover is not None and "pending" not in takeover.extra
    assert set(report["takeover_offsets"].values()) == {0}


def _utf8(data: bytes | None) -> str | None:
    try:
        return None if data is None else data.decode()
    except UnicodeDecodeError:
        return None
