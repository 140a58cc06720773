"""End to end: word_count upgraded to word_count_v2 under a new application id, with kill -9s.

v1 (the shipped word_count, counts stored as `int`) runs on the first part of the input and
is killed twice at random moments, the second time for good: tasks hold uncommitted batches
and its repartition topic holds records its count tasks never committed. Then
``statekeeper upgrade migrate --local`` to the shipped word_count_v2 (per word
``{"count": n, "first_seen_ms": ts}`` in JSON: a value serde change) is killed
``ceil(K/2)`` times at random moments and run to the end; v2 starts on the migrated state
(it takes over: statekeeper.versions.takeover) and is killed ``floor(K/2)`` times while the
rest of the input arrives, then drains it. ``K`` is ``STATEKEEPER_UPGRADE_KILLS`` (2 in
``make test``, 12 in ``make test-chaos``).

v2's final counts must equal an independent recomputation over the whole input (a record
lost or counted twice anywhere across the cut-over shows as a wrong count), and so must the
latest deduplicated output per word (v2's on its own topic, else v1's). ``first_seen_ms`` is
checked for the words only v2's input holds (the reference cannot know which words of the
old version's uncommitted tail v2 counted first).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from spark_apps.word_count.generator import word_count_lines
from spark_apps.word_count_v2 import reference as v2_ref
from statekeeper.app.store_reader import read_store
from statekeeper.generate.producer import produce
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.processing.output_reader import read_deduped as deduped
from statekeeper.testing.app_process import spark_app_spec
from statekeeper.versions.recorded import state_root
from statekeeper.versions.takeover import read_takeover, takeover_path
from tests.e2e.harness import AppUnderTest

KILLS = int(os.environ.get("STATEKEEPER_UPGRADE_KILLS", "2"))
MIGRATE_KILLS, V2_KILLS = (KILLS + 1) // 2, KILLS // 2
PARTITIONS = 4
LINES = 6_000 if KILLS <= 2 else 12_000

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(max(600, 60 * (KILLS + 6)))]


def _seed() -> int:
    seed = int(os.environ.get("STATEKEEPER_E2E_SEED", random.randrange(1 << 30)))
    print(
        f"upgrade seed {seed}, {KILLS} kills (rerun with STATEKEEPER_E2E_SEED={seed} "
        f"STATEKEEPER_UPGRADE_KILLS={KILLS})"
    )
    return seed


def _v2_app(v1: AppUnderTest, workdir: Path, params: dict[str, str]) -> AppUnderTest:
    """The shipped word_count_v2 re-targeted like v1, sharing its state and checkpoint roots
    (under another application id)."""
    v2 = AppUnderTest.create("word_count_v2", "", workdir, v1.app_id.split("-")[-1], params)
    v2.overrides = {**v1.overrides, "status_file": str(workdir / "status.json")}
    return v2


def _migrate(v1: AppUnderTest, v2: AppUnderTest, rng: random.Random, kills: list) -> dict:
    """``upgrade migrate --local`` in a child process, killed ``MIGRATE_KILLS`` times at a
    random moment, then run to the end; its JSON report."""
    cmd = [
        sys.executable,
        "-m",
        "statekeeper.cli",
        "upgrade",
        "migrate",
        "--app",
        str(v2.spec_path),
    ]
    cmd += ["--from", str(v1.spec_path), "--local", "--json"]
    for key in ("bootstrap_servers", "state_dir", "checkpoint_dir"):
        cmd += ["--set", f"{key}={v1.overrides[key]}"]
    for attempt in range(MIGRATE_KILLS + 1):
        log = open(v2.workdir / f"migrate{attempt}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        if attempt < MIGRATE_KILLS:
            delay = rng.uniform(1.0, 6.0)
            try:
                proc.wait(delay)
                outcome = f"finished before the kill (rc {proc.returncode})"
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.wait()
                outcome = "killed"
            kills.append(
                {
                    "stage": "migrate",
                    "attempt": attempt,
                    "delay_s": round(delay, 2),
                    "outcome": outcome,
                }
            )
            continue
        out, _ = proc.communicate(timeout=300)
        log.close()
        err = (v2.workdir / f"migrate{attempt}.log").read_text()[-3000:]
        assert proc.returncode == 0, f"migrate exited {proc.returncode}:\n{err}"
        return json.loads(out)
    raise AssertionError("unreachable")


def test_word_count_upgrade_is_exact_under_kill9(broker, tmp_path) -> None:
    bootstrap = broker.bootstrap_servers
    seed = _seed()
    rng = random.Random(seed)
    suffix = uuid.uuid4().hex[:6]
    topic, out = f"lines-{suffix}", f"word-counts-{suffix}"
    lines = list(word_count_lines(LINES, seed=seed))
    chunks = 2 + V2_KILLS + 1  # v1's two runs, v2's killed runs, its final run
    size = -(-len(lines) // chunks)

    def feed(chunk: int) -> None:
        part = lines[chunk * size : (chunk + 1) * size]
        if part:
            produce(bootstrap, topic, part, partitions=PARTITIONS)

    assert spark_app_spec("word_count").exists()
    v1 = AppUnderTest.create(
        "word_count",
        bootstrap,
        tmp_path / "v1",
        suffix,
        {"input_topic": topic, "output_topic": out},
        max_records_per_batch=1_000,
        commit_interval_ms=2_000,
    )
    # v1 is killed in both runs: the second kill leaves it down for good.
    v1.kill_at_random_moments(2, rng, before=feed)
    kills: list = [{"stage": "v1", **k} for k in v1.kills]

    out_v2 = f"word-counts-v2-{suffix}"
    v2 = _v2_app(v1, tmp_path / "v2", {"input_topic": topic, "output_topic": out_v2})
    report = _migrate(v1, v2, rng, kills)
    takeover = read_takeover(takeover_path(state_root(v1.overrides["state_dir"], v2.app_id)))
    assert takeover is not None and not takeover.extra.get("pending")
    assert report["takeover"]["batch_base"] == takeover.batch_base > 0
    print(f"takeover: {json.dumps(takeover.to_dict())}")

    v2.kill_at_random_moments(V2_KILLS, rng, before=lambda run: feed(2 + run))
    kills += [{"stage": "v2", **k} for k in v2.kills]
    feed(2 + V2_KILLS)
    v2.run_to_completion(V2_KILLS)
    print(f"upgrade kills: {json.dumps(kills)}")

    first_v2 = {p: o for p, o in takeover.floors[0][topic].items()}
    expected = v2_ref.recompute(read_topic(bootstrap, topic), upgraded_at=first_v2)
    entries = read_store(v2.settings, v2.spec.build_topology(), "word-counts", PARTITIONS)
    want = {w: e["count"] for w, e in expected.counts.items()}
    assert {w: e["count"] for w, e in entries.items()} == want, f"kills: {json.dumps(kills)}"
    only_v2 = {w: e["first_seen_ms"] for w, e in expected.counts.items() if e["first_seen_ms"]}
    assert {w: entries[w]["first_seen_ms"] for w in only_v2} == only_v2

    latest: dict[str, int] = {}
    for record in deduped(bootstrap, out):
        latest[record.key.decode()] = int(record.value)  # type: ignore[union-attr,arg-type]
    for record in deduped(bootstrap, out_v2):
        latest[record.key.decode()] = json.loads(record.value)["count"]  # type: ignore[union-attr,arg-type]
    assert latest == want
