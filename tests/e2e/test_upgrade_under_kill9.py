"""End to end: a shipped app upgraded to its v2 under a new application id, with kill -9s.

Two upgrades, the same series: word_count → word_count_v2 (counts stored as ``int`` become
``{"count": n, "first_seen_ms": ts}`` in JSON: a value serde change; a repartition topic
between a stateless and a stateful subtopology; and, in the ``rekeyed-4-to-6`` variant, v2
counts words in 6 tasks instead of v1's 4, so the migration re-keys the counts and v2's
tasks read v1's uncommitted repartition tail from every old partition) and
patient_monitoring →
patient_monitoring_v2 (heart-rate entries gain ``window_end`` by a migration; a new window
store ``temperature-peaks`` starts empty; one stateful subtopology).

v1 runs on the first part of the input and is killed at random moments (once in ``make
test``, twice in ``make test-chaos``), the last time for good: tasks hold uncommitted
batches (and word_count's repartition topic holds records its count tasks never
committed). Then the cut-over to v2 (``statekeeper upgrade
cutover --local``: the migration, its verification read back from v2's changelogs, the
upgrade history) is killed ``ceil(K/2)`` times at random moments and run to the end; v2
starts on the migrated state (it takes over: statekeeper.versions.takeover) and is killed
``floor(K/2)`` times while the rest of the input arrives, then drains it. ``K`` is
``STATEKEEPER_UPGRADE_KILLS`` (2 in ``make test``, 12 in ``make test-chaos``).

word_count: v2's final counts must equal an independent recomputation over the whole input
(a record lost or counted twice anywhere across the cut-over shows as a wrong count), and so
must the latest deduplicated output per word (v2's on its own topic, else v1's).
``first_seen_ms`` is checked for the words only v2's input holds (the reference cannot know
which words of the old version's uncommitted tail v2 counted first).

patient_monitoring: v2's stores equal v2's reference run with ``upgraded_at`` = the takeover's
floors (per partition, the first offset v2 processes: where each migrated task committed);
``temperature-peaks`` holds exactly the readings from there on. Every output (alerts, heart
rate, DLQ) comes from one input record (``sk.source``): v2's deduplicated outputs must be
exactly those of the records from the floors on, and v1's those of the records before
(plus, at most, outputs of its uncommitted tail that v2 emits again).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from spark_apps.patient_monitoring import reference as pm_ref
from spark_apps.patient_monitoring.generator import patient_events
from spark_apps.patient_monitoring_v2 import reference as pm_v2_ref
from spark_apps.word_count.generator import word_count_lines
from spark_apps.word_count_v2 import reference as v2_ref
from statekeeper.app.store_reader import read_store
from statekeeper.generate.producer import produce
from statekeeper.kafka.model import KafkaRecord
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.processing.dlq import dlq_topic
from statekeeper.processing.output_reader import read_deduped as deduped
from statekeeper.processing.output_reader import source_positions as sources_of
from statekeeper.testing.app_process import spark_app_spec
from statekeeper.versions.recorded import state_root
from statekeeper.versions.takeover import Takeover, read_takeover, takeover_path
from tests.e2e.harness import AppUnderTest, series_seed

KILLS = int(os.environ.get("STATEKEEPER_UPGRADE_KILLS", "2"))
MIGRATE_KILLS, V2_KILLS = (KILLS + 1) // 2, KILLS // 2
#: v1's runs, each killed: the last one leaves it down for good (one in make test, where a
#: Spark start is the series' cost; two, a restart after a kill between, in test-chaos).
V1_RUNS = 1 if KILLS <= 2 else 2
#: The input's chunks: v1's runs, v2's killed runs, its final run.
CHUNKS = V1_RUNS + V2_KILLS + 1
PARTITIONS = 4
LINES = 6_000 if KILLS <= 2 else 12_000
#: Simulated minutes of patient events (24 patients: ~2,000 records a minute).
PATIENT_MINUTES = 25 if KILLS <= 2 else 50

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(max(600, 60 * (KILLS + 6)))]

Position = tuple[str, int, int]


def _seed() -> int:
    return series_seed("upgrade", KILLS, "STATEKEEPER_UPGRADE_KILLS")


def _feeder(bootstrap: str, topic: str, records: list) -> Callable[[int], None]:
    """Produce ``records`` in :data:`CHUNKS` chunks, ``feed(chunk)`` one at a time."""
    size = -(-len(records) // CHUNKS)

    def feed(chunk: int) -> None:
        part = records[chunk * size : (chunk + 1) * size]
        if part:
            produce(bootstrap, topic, part, partitions=PARTITIONS)

    return feed


def _statekeeper(command: list[str], app: AppUnderTest, overrides: dict[str, str]) -> list[str]:
    cmd = [sys.executable, "-m", "statekeeper.cli", *command, "--app", str(app.spec_path)]
    for key in ("bootstrap_servers", "state_dir", "checkpoint_dir"):
        cmd += ["--set", f"{key}={overrides[key]}"]
    return cmd


def _killed_then_finished(
    stage: str, cmd: list[str], workdir: Path, rng: random.Random, kills: list, target: int
) -> dict:
    """``cmd`` (a statekeeper command with ``--json``) in a child process, killed ``target``
    times at random moments, then run to the end; its JSON report. Kill moments are drawn
    over 0.3-4 s (a whole cut-over of these apps takes ~3-6 s, a re-run of a finished one
    less); an attempt that finishes first is not a kill, and attempts go on (at most three
    per kill) until ``target`` kills have landed."""
    landed, attempt = 0, 0
    while True:
        log_path = workdir / f"{stage}{attempt}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
            if landed < target and attempt < 3 * target:
                delay = rng.uniform(0.3, 4.0)
                try:
                    proc.wait(delay)
                    outcome = f"finished before the kill (rc {proc.returncode})"
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)
                    proc.wait()
                    outcome = "killed"
                    landed += 1
                kills.append(
                    {"stage": stage, "attempt": attempt, "delay_s": round(delay, 2)}
                    | {"outcome": outcome}
                )
                attempt += 1
                continue
            out, _ = proc.communicate(timeout=300)
        err = log_path.read_text()[-3000:]
        assert proc.returncode == 0, f"{stage} exited {proc.returncode}:\n{err}"
        return json.loads(out)


def _migrate(v1: AppUnderTest, v2: AppUnderTest, rng: random.Random, kills: list) -> dict:
    """``upgrade cutover --local`` (the migration, its verification and the upgrade history)
    killed ``MIGRATE_KILLS`` times at random moments, then run to the end; the migration's
    JSON report."""
    cmd = _statekeeper(["upgrade", "cutover"], v2, v1.overrides)
    cmd += ["--from", str(v1.spec_path), "--local", "--json"]
    report = _killed_then_finished("cutover", cmd, v2.workdir, rng, kills, MIGRATE_KILLS)
    assert report["verify"]["ok"], report["verify"]
    return report["migration"]


@dataclass
class Upgraded:
    """What :func:`_upgrade_under_kills` leaves: both versions (stopped), the takeover record
    the migration wrote, and every kill with its outcome."""

    v1: AppUnderTest
    v2: AppUnderTest
    takeover: Takeover
    kills: list[dict[str, Any]]
    report: dict[str, Any]

    def upgraded_at(self, topic: str) -> dict[int, int]:
        """Per partition of ``topic``, the first offset v2's subtopology 0 (the one reading the
        source, in both apps) processes: the takeover's floor. A partition without one (its
        v1 task never committed) is read by v2 from its start: 0."""
        floors = self.takeover.floors.get(0, {}).get(topic, {})
        return {p: floors.get(p, 0) for p in range(PARTITIONS)}


def _upgrade_under_kills(
    v1: AppUnderTest,
    v2_name: str,
    v2_params: dict[str, str],
    feed: Callable[[int], None],
    rng: random.Random,
    fill: str | None = None,
) -> Upgraded:
    """The series: v1 killed ``V1_RUNS`` times (for good the last time), its migration to
    the shipped ``v2_name`` killed ``MIGRATE_KILLS`` times then finished, ``backfill
    --store fill`` (a store new in v2, filled from history) killed as often, v2 killed
    ``V2_KILLS`` times while the input's later chunks arrive, then drained. v2 is
    re-targeted like v1 and shares its state and checkpoint roots (under another
    application id)."""
    # v1 is killed in every run: the last kill leaves it down for good.
    v1.kill_at_random_moments(V1_RUNS, rng, before=feed)
    kills: list[dict[str, Any]] = [{"stage": "v1", **k} for k in v1.kills]

    suffix = v1.app_id.split("-")[-1]
    v2 = AppUnderTest.create(v2_name, "", v1.workdir.with_name("v2"), suffix, v2_params)
    v2.overrides = {**v1.overrides, "status_file": str(v2.workdir / "status.json")}
    report = _migrate(v1, v2, rng, kills)
    takeover = read_takeover(takeover_path(state_root(v1.overrides["state_dir"], v2.app_id)))
    assert takeover is not None and not takeover.extra.get("pending")
    assert report["takeover"]["batch_base"] == takeover.batch_base > 0
    print(f"takeover: {json.dumps(takeover.to_dict())}")
    if fill is not None:
        cmd = _statekeeper(["backfill", "--store", fill, "--json"], v2, v1.overrides)
        filled = _killed_then_finished("fill", cmd, v2.workdir, rng, kills, MIGRATE_KILLS)
        print(f"fill: {json.dumps(filled)}")

    v2.kill_at_random_moments(V2_KILLS, rng, before=lambda run: feed(V1_RUNS + run))
    kills += [{"stage": "v2", **k} for k in v2.kills]
    feed(V1_RUNS + V2_KILLS)
    v2.run_to_completion(V2_KILLS)
    print(f"upgrade kills: {json.dumps(kills)}")
    return Upgraded(v1, v2, takeover, kills, report)


@pytest.mark.parametrize(
    "word_partitions",
    [
        # v2 counts words in 6 tasks instead of v1's 4: the migration re-keys the counts
        # and v2's tasks read v1's uncommitted repartition records from every old partition.
        pytest.param(6, id="rekeyed-4-to-6"),
        pytest.param(None, id="same-tasks", marks=pytest.mark.chaos),
    ],
)
def test_word_count_upgrade_is_exact_under_kill9(broker, tmp_path, word_partitions) -> None:
    bootstrap = broker.bootstrap_servers
    seed = _seed()
    suffix = uuid.uuid4().hex[:6]
    topic, out, out_v2 = f"lines-{suffix}", f"word-counts-{suffix}", f"word-counts-v2-{suffix}"
    feed = _feeder(bootstrap, topic, list(word_count_lines(LINES, seed=seed)))

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
    v2_params = {"input_topic": topic, "output_topic": out_v2}
    if word_partitions is not None:
        v2_params["word_partitions"] = str(word_partitions)
    up = _upgrade_under_kills(v1, "word_count_v2", v2_params, feed, random.Random(seed))
    tasks = word_partitions or PARTITIONS
    rekeyed = [t for t in up.report["tasks"] if t["task"].startswith("1_")]
    assert [t["task"] for t in rekeyed] == [f"1_{p}" for p in range(tasks)]
    if word_partitions is not None:  # every v2 task carries every v1 task's offsets
        words = f"{v1.app_id}-words-repartition"
        assert all(
            {tp for tp in t["source_offsets"] if tp.startswith(words)}
            == {f"{words}:{p}" for p in range(PARTITIONS)}
            for t in rekeyed
            if t["batch_id"] is not None
        ), rekeyed

    expected = v2_ref.recompute(read_topic(bootstrap, topic), upgraded_at=up.upgraded_at(topic))
    entries = read_store(up.v2.settings, up.v2.spec.build_topology(), "word-counts", tasks)
    want = {w: e["count"] for w, e in expected.counts.items()}
    assert {w: e["count"] for w, e in entries.items()} == want, f"kills: {json.dumps(up.kills)}"
    only_v2 = {w: e["first_seen_ms"] for w, e in expected.counts.items() if e["first_seen_ms"]}
    assert {w: entries[w]["first_seen_ms"] for w in only_v2} == only_v2

    latest: dict[str, int] = {}
    for record in deduped(bootstrap, out):
        latest[record.key.decode()] = int(record.value)  # type: ignore[union-attr,arg-type]
    for record in deduped(bootstrap, out_v2):
        latest[record.key.decode()] = json.loads(record.value)["count"]  # type: ignore[union-attr,arg-type]
    assert latest == want


Outputs = list[tuple[Position, Any]]  # (sk.source, value) per deduplicated output record


def _read_outputs(bootstrap: str, topic: str, value: Callable[[KafkaRecord], Any]) -> Outputs:
    records = deduped(bootstrap, topic)
    return list(zip(sources_of(records), map(value, records), strict=True))


def _json(record: KafkaRecord) -> Any:
    return json.loads(record.value)  # type: ignore[arg-type]


def _heart_rate(v1: bool) -> Callable[[KafkaRecord], Any]:
    """A heart-rate output as ``[patient, v2's entry or None]`` (v1's entries with the
    ``window_end`` v2 computes)."""

    def value(record: KafkaRecord) -> Any:
        entry = None if record.value is None else _json(record)
        if v1 and entry is not None:
            entry = pm_v2_ref.heart_rate_entry(entry)
        return [record.key.decode(), entry]  # type: ignore[union-attr]

    return value


def _split(outputs: Outputs, cut: dict[int, int]) -> tuple[list[str], list[str]]:
    """``outputs`` → (those of input records before the cut, those from it on), each as
    sorted JSON lines (a multiset, readable in a failure's diff)."""
    before, after = [], []
    for source, value in outputs:
        line = json.dumps([list(source), value], sort_keys=True)
        (after if source[2] >= cut[source[1]] else before).append(line)
    return sorted(before), sorted(after)


def _check_outputs(
    name: str, v1_got: Outputs, v2_got: Outputs, expected: Outputs, cut: dict[int, int]
) -> None:
    """v2's outputs are exactly those of the input records from the cut on; v1's, those of
    the records before it, plus some from the cut on (of its uncommitted batches: v2 emits
    them again)."""
    want_v1, want_v2 = _split(expected, cut)
    got_v1, tail_v1 = _split(v1_got, cut)
    assert _split(v2_got, cut) == ([], want_v2), f"v2's {name}"
    assert got_v1 == want_v1, f"v1's {name}"
    assert not Counter(tail_v1) - Counter(want_v2), f"v1's {name} of its uncommitted batches"


# ~150 s: make test-chaos only (make test keeps word_count's series, whose takeover also
# carries a repartition tail; this one adds a new window store and one stateful subtopology).
@pytest.mark.chaos
def test_patient_monitoring_upgrade_is_exact_under_kill9(broker, tmp_path) -> None:
    bootstrap = broker.bootstrap_servers
    seed = _seed()
    suffix = uuid.uuid4().hex[:6]
    topic = f"patient-events-{suffix}"
    names = {"alerts_topic": "patient-alerts", "heart_rate_topic": "heart-rate"}
    v1_topics = {param: f"{name}-{suffix}" for param, name in names.items()}
    v2_topics = {param: f"{name}-v2-{suffix}" for param, name in names.items()}
    events = patient_events(patients=24, minutes=PATIENT_MINUTES, seed=seed, malformed_share=0.01)
    feed = _feeder(bootstrap, topic, events)

    v1 = AppUnderTest.create(
        "patient_monitoring",
        bootstrap,
        tmp_path / "v1",
        suffix,
        {"input_topic": topic, **v1_topics},
        # Half the kill -9 series' batches: a chunk of input is 5-6 of them, so v1's kills
        # often leave its tasks behind its last micro-batch (floors before where it ended).
        max_records_per_batch=2_000,
        commit_interval_ms=2_000,
    )
    v2_params = {"input_topic": topic, **v2_topics}
    up = _upgrade_under_kills(
        v1, "patient_monitoring_v2", v2_params, feed, random.Random(seed), "temperature-peaks"
    )
    kills = f"kills: {json.dumps(up.kills)}"

    # One subtopology: v2's query starts where its tasks' floors are (from the log's start
    # for a task v1 never committed), and each floor is where v1's task committed.
    cut = up.upgraded_at(topic)
    floors = up.takeover.floors.get(0, {}).get(topic, {})
    assert up.takeover.start_offsets[topic] == {p: floors.get(p, -2) for p in range(PARTITIONS)}
    records = read_topic(bootstrap, topic)
    expected = pm_v2_ref.recompute(records, upgraded_at=cut)
    assert expected.temperature_peaks and expected.alerts and expected.dlq
    # temperature-peaks, new in v2, was filled from the input's start up to the cut: it
    # holds what v2 would hold had it read everything (empty at the cut, it would not).
    whole = pm_v2_ref.recompute(records).temperature_peaks
    assert whole != expected.temperature_peaks

    topology = up.v2.spec.build_topology()
    stores = {
        store: read_store(up.v2.settings, topology, store, PARTITIONS)
        for store in ("pulse-counts", "heart-rate", "temperature-peaks")
    }
    assert stores["pulse-counts"] == expected.pulse_windows, kills
    assert stores["heart-rate"] == expected.heart_rate, kills
    assert stores["temperature-peaks"] == whole, kills

    v1_dlq, v2_dlq = (
        _read_outputs(bootstrap, dlq_topic(app.app_id), lambda _: None) for app in (up.v1, up.v2)
    )
    _check_outputs("DLQ", v1_dlq, v2_dlq, [(s, None) for s in expected.dlq], cut)

    want = list(zip(expected.alert_sources, expected.alerts, strict=True))
    v1_alerts = _read_outputs(bootstrap, v1_topics["alerts_topic"], _json)
    v2_alerts = _read_outputs(bootstrap, v2_topics["alerts_topic"], _json)
    _check_outputs("alerts", v1_alerts, v2_alerts, want, cut)

    want = list(
        zip(
            expected.heart_rate_output_sources,
            [list(kv) for kv in expected.heart_rate_outputs],
            strict=True,
        )
    )
    v1_rates = _read_outputs(bootstrap, v1_topics["heart_rate_topic"], _heart_rate(True))
    v2_rates = _read_outputs(bootstrap, v2_topics["heart_rate_topic"], _heart_rate(False))
    _check_outputs("heart rate", v1_rates, v2_rates, want, cut)
    # What a consumer of v1's topic, then v2's, ends with.
    latest = pm_ref.latest_heart_rate((k, v) for _, (k, v) in v1_rates + v2_rates)
    assert latest == expected.heart_rate
