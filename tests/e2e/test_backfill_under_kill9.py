"""End to end: ``statekeeper backfill`` of word_count killed with kill -9, run again, then the
stream.

The backfill runs as a child process (``python -m statekeeper.cli backfill``, its own process
group: driver, Spark JVM, Python workers) over a history, with small micro-batches and a
commit interval that leaves tasks holding uncommitted batches, and is killed
``STATEKEEPER_BACKFILL_KILLS`` times (2 by default; 6 in ``make test-chaos``, which sets
``STATEKEEPER_E2E_KILLS=20``) at a random
moment: while Spark starts or in its first micro-batch, or after a few micro-batches. More
input arrives before every run (each run's ``--until now`` is further on). The last run goes
to the end: the store and the deduplicated outputs equal the reference recomputation of
exactly the records below its until offsets. Then more input and the ordinary stream
(``app run --stop-when-idle`` in a child process): every record counted once.
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
from typing import Any

import pytest

from spark_apps.word_count.generator import word_count_lines
from spark_apps.word_count.reference import recompute
from statekeeper.app.child_process import child_env
from statekeeper.app.store_reader import read_store
from statekeeper.generate.producer import produce
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.processing.output_reader import read_deduped
from tests.e2e.harness import AppUnderTest, series_seed

#: make test-chaos sets STATEKEEPER_E2E_KILLS=20 (make test 2): a longer series there.
_CHAOS = int(os.environ.get("STATEKEEPER_E2E_KILLS", "2")) >= 10
KILLS = int(os.environ.get("STATEKEEPER_BACKFILL_KILLS", "6" if _CHAOS else "2"))
PARTITIONS = 4
LINES = 16_000
BATCH = 2_000

# ~120 s: make test-chaos only (make test keeps tests/spark/test_backfill.py: a backfill to
# explicit offsets and to now, then the stream, exact).
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.chaos,
    pytest.mark.timeout(max(600, 90 * (KILLS + 3))),
]


def _seed() -> int:
    return series_seed("backfill", KILLS, "STATEKEEPER_BACKFILL_KILLS")


def _command(app: AppUnderTest) -> list[str]:
    cmd = [sys.executable, "-m", "statekeeper.cli", "backfill", *app.cli_args()]
    return [*cmd, "--until", "now", "--max-records-per-batch", str(BATCH), "--json"]


def _status(app: AppUnderTest) -> dict[str, Any]:
    try:
        return json.loads(Path(app.overrides["status_file"]).read_text())
    except (OSError, ValueError):
        return {}


def _start(app: AppUnderTest, run: int) -> tuple[subprocess.Popen[bytes], Path]:
    Path(app.overrides["status_file"]).unlink(missing_ok=True)
    log = app.workdir / f"backfill{run}.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            _command(app),
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
            env=child_env(),  # dies with this process
        )
    return proc, log


def _kill_at_a_random_moment(app: AppUnderTest, run: int, rng: random.Random) -> dict[str, Any]:
    proc, log = _start(app, run)
    early = rng.random() < 0.5
    batches = 0 if early else rng.randint(1, 4)
    delay = rng.uniform(0.0, 3.0 if early else 1.5)
    deadline = time.monotonic() + 300
    outcome = "killed"
    while proc.poll() is None and time.monotonic() < deadline:
        status = _status(app)
        done = int((status.get("throughput") or {}).get("batches", 0))
        if (early and status.get("state") in ("REBALANCING", "RESTORING", "RUNNING")) or (
            not early and done >= batches
        ):
            break
        time.sleep(0.1)
    time.sleep(delay)
    if proc.poll() is not None:
        outcome = f"finished before the kill (rc {proc.returncode})"
        assert proc.returncode == 0, log.read_text()[-3000:]
    last = (_status(app).get("last_batch") or {}).get("batch_id")
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    if proc.stdout is not None:
        proc.stdout.close()
    return {
        "run": run,
        "early": early,
        "after_batches": batches,
        "delay_s": round(delay, 2),
        "last_batch": last,
        "outcome": outcome,
    }


def test_backfill_killed_then_run_again_then_the_stream_is_exact(broker, tmp_path) -> None:
    bootstrap = broker.bootstrap_servers
    rng = random.Random(_seed())
    suffix = uuid.uuid4().hex[:6]
    topic, out = f"bf9-lines-{suffix}", f"bf9-counts-{suffix}"
    lines = list(word_count_lines(LINES, seed=rng.randrange(1 << 20)))
    history = LINES // 2
    produce(bootstrap, topic, lines[:history], partitions=PARTITIONS)
    app = AppUnderTest.create(
        "word_count",
        bootstrap,
        tmp_path / "wc",
        suffix,
        {"input_topic": topic, "output_topic": out},
        commit_interval_ms=1_500,
        trigger_interval_ms=200,
    )
    # More history arrives before each run: each run's --until now is further on.
    chunk = (LINES // 4) // (KILLS + 1)
    fed = history
    kills = []
    for run in range(KILLS):
        produce(bootstrap, topic, lines[fed : fed + chunk], partitions=PARTITIONS)
        fed += chunk
        kills.append(_kill_at_a_random_moment(app, run, rng))
    produce(bootstrap, topic, lines[fed : fed + chunk], partitions=PARTITIONS)
    fed += chunk
    print(f"kills: {json.dumps(kills)}")

    proc, log = _start(app, KILLS)
    started = time.monotonic()
    stdout, _ = proc.communicate(timeout=600)
    seconds = time.monotonic() - started
    assert proc.returncode == 0, log.read_text()[-4000:]
    report = json.loads(stdout)
    print(f"final backfill ({seconds:.1f} s): {json.dumps(report)}")
    assert report["snapshot"]["state"] == "uploaded", report["snapshot"]
    until = {int(p): o for p, o in report["until"][topic].items()}
    assert sum(until.values()) == fed
    assert {int(p): o for p, o in report["stream_continues_at"][topic].items()} == until

    topology = app.spec.build_topology()
    expected = recompute(read_topic(bootstrap, topic)).counts
    assert read_store(app.settings, topology, "word-counts", PARTITIONS) == expected, kills
    latest = {r.key.decode(): int(r.value) for r in read_deduped(bootstrap, out)}  # type: ignore[union-attr,arg-type]
    assert latest == expected, kills

    # The stream continues: the rest of the input, each record counted once.
    produce(bootstrap, topic, lines[fed:], partitions=PARTITIONS)
    status = app.run_to_completion(KILLS + 1)
    print(f"stream: {json.dumps(status.get('totals'))}")
    expected = recompute(read_topic(bootstrap, topic)).counts
    assert read_store(app.settings, topology, "word-counts", PARTITIONS) == expected, kills
    latest = {r.key.decode(): int(r.value) for r in read_deduped(bootstrap, out)}  # type: ignore[union-attr,arg-type]
    assert latest == expected, kills
