"""End to end: a shadow run of word_count_v2 beside word_count, diffed, then cut over.

v1 runs (Spark, a child process) and keeps running while its state is migrated to v2 (a new
application id); v2 starts on it and runs beside v1 on the same input, writing its own
outputs. With the input quiet and both caught up, ``upgrade diff`` finds them aligned with
no unexpected key, state or output (v2's ``first_seen_ms`` for words it saw first is an
expected difference, by the spec's ``compare``; v2's JSON output of a word against v1's count
as text, by its ``outputs.output_topic.compare``); one wrong value produced to v2's output
topic is then the one unexpected output key, and the diff fails. While input is pending it
says they are not aligned. Then ``upgrade cutover --shadow --stop-old`` stops v1 and records
the cut-over; v2 runs on, its final counts equal a recomputation over the whole input, and
``drill --spark`` of v2 (its drill model: counts over the whole input) passes.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from spark_apps.word_count.generator import word_count_lines
from spark_apps.word_count_v2 import reference as v2_ref
from statekeeper.airflow.supervision.policy import pending_records
from statekeeper.app.store_reader import read_store
from statekeeper.cli import main
from statekeeper.generate.producer import produce
from statekeeper.kafka.adapter import producer_config
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.versions.history import active_override
from statekeeper.versions.recorded import state_root
from statekeeper.versions.takeover import read_takeover, takeover_path
from tests.e2e.harness import AppUnderTest

PARTITIONS = 4

# ~120 s: make test-chaos only (make test keeps the cut-over under kill -9, the diff's
# verification in tests/integration/test_upgrade_cutover.py and the DAG).
pytestmark = [pytest.mark.e2e, pytest.mark.chaos, pytest.mark.timeout(900)]


def _caught_up(status_file: Path, batches_after: int = -1, timeout_s: float = 240) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            doc = json.loads(status_file.read_text())
        except (OSError, ValueError):
            doc = {}
        batch = (doc.get("last_batch") or {}).get("batch_id", -1)
        if doc.get("state") == "RUNNING" and pending_records(doc) == 0 and batch > batches_after:
            return doc
        time.sleep(0.5)
    raise AssertionError(f"{status_file} not caught up after {timeout_s:.0f} s")


def _committed(status_file: Path, timeout_s: float = 120) -> None:
    """Every task of the app has committed (a fast app can be caught up before it has)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            tasks = json.loads(status_file.read_text()).get("tasks") or {}
        except (OSError, ValueError):
            tasks = {}
        if tasks and all(_has_committed(t) for t in tasks.values()):
            return
        time.sleep(0.5)
    raise AssertionError(f"{status_file}: not every task committed after {timeout_s:.0f} s")


def _has_committed(task: dict) -> bool:
    batch = task.get("committed_batch_id")
    return batch is not None and batch >= 0


def _last_batch(status_file: Path) -> int:
    try:
        return (json.loads(status_file.read_text()).get("last_batch") or {}).get("batch_id", -1)
    except (OSError, ValueError):
        return -1


def _cli(args: list[str], capsys: Any) -> tuple[int, Any]:
    code = main(args)
    out = capsys.readouterr()
    return code, (json.loads(out.out) if "--json" in args and out.out.strip() else out)


def _a_latest_output(bootstrap: str, topic: str) -> tuple[str, int, dict]:
    """A word of ``topic`` with its partition and latest value."""
    latest = {}
    for partition, records in read_topic(bootstrap, topic).items():
        for record in records:
            latest[record.key.decode()] = (partition, json.loads(record.value))
    word = sorted(latest)[0]
    return word, *latest[word]


def _produce_one(bootstrap: str, topic: str, partition: int, key: str, value: Any) -> None:
    producer = Producer(producer_config(bootstrap))
    producer.produce(topic, json.dumps(value).encode(), key.encode(), partition=partition)
    assert producer.flush(30) == 0


def test_a_shadow_run_is_diffed_then_cut_over(broker, tmp_path, capsys) -> None:
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    topic = f"lines-{suffix}"
    v1 = AppUnderTest.create(
        "word_count",
        bootstrap,
        tmp_path / "v1",
        suffix,
        {"input_topic": topic, "output_topic": f"wc-{suffix}"},
        max_records_per_batch=2_000,
    )
    v2 = AppUnderTest.create(
        "word_count_v2",
        bootstrap,
        tmp_path / "v2",
        suffix,
        {"input_topic": topic, "output_topic": f"wc2-{suffix}"},
    )
    # Status files where the commands look for them: <state_dir>/<app>/status.json.
    state_dir = Path(v1.overrides["state_dir"])
    v1.overrides["status_file"] = str(state_dir / v1.app_id / "status.json")
    v2.overrides = {**v1.overrides, "status_file": str(state_dir / v2.app_id / "status.json")}
    v1_status, v2_status = Path(v1.overrides["status_file"]), Path(v2.overrides["status_file"])
    common = ["--bootstrap", bootstrap]
    for key in ("state_dir", "checkpoint_dir"):
        common += ["--set", f"{key}={v1.overrides[key]}"]
    versions = ["--app", str(v2.spec_path), "--from", str(v1.spec_path)]

    produce(bootstrap, topic, word_count_lines(2_000, seed=41), partitions=PARTITIONS)
    old = v1.process(0, stop_when_idle=False).start()
    new = None
    try:
        _caught_up(v1_status)
        _committed(v1_status)  # the migration reads v1's last commit, not what it processed
        # Migrated while v1 runs: v2 takes over at this point and runs beside it.
        code, out = _cli(["upgrade", "migrate", *versions, "--local", *common], capsys)
        assert code == 0, out.err
        new = v2.process(0, stop_when_idle=False).start()
        _caught_up(v2_status)
        batches = (_last_batch(v1_status), _last_batch(v2_status))
        produce(bootstrap, topic, word_count_lines(1_500, seed=42), partitions=PARTITIONS)
        _caught_up(v1_status, batches[0])
        _caught_up(v2_status, batches[1])
        # Both report nothing pending; the downstream tasks still take in the last
        # repartition records: the diff says what is behind until they have.
        deadline = time.monotonic() + 120
        while True:
            code, diff = _cli(["upgrade", "diff", *versions, "--json", *common], capsys)
            if diff["aligned"] or time.monotonic() > deadline:
                break
            time.sleep(2)
        examples = [
            e
            for t in diff["compared"]["tasks"]
            for s in t["stores"].values()
            for e in s["examples"]
        ]
        assert code == 0 and diff["aligned"] and diff["ok"], (diff["compared"]["totals"], examples)
        totals = diff["compared"]["totals"]
        assert totals["unexpected"] == 0 and totals["expected_different"] > 0, totals
        # The outputs too: the latest value per word of v1's topic against v2's.
        assert diff["outputs"] is not None, diff
        outputs = diff["outputs"]["totals"]
        assert outputs["unexpected"] == 0 and outputs["expected_different"] > 0, diff["outputs"]
        assert diff["outputs"]["topics"][0]["new_topic"] == f"wc2-{suffix}"

        # One wrong value for one word on v2's output topic (its partition, no sk.* headers:
        # a consumer sees it all the same): exactly that word is unexpected, and diff fails.
        word, partition, value = _a_latest_output(bootstrap, f"wc2-{suffix}")
        wrong = {**value, "count": value["count"] + 1000}
        _produce_one(bootstrap, f"wc2-{suffix}", partition, word, wrong)
        code, diff = _cli(["upgrade", "diff", *versions, "--json", *common], capsys)
        assert code == 1 and diff["aligned"] and not diff["ok"], diff["behind"]
        assert diff["compared"]["totals"]["unexpected"] == 0
        assert diff["outputs"]["totals"]["unexpected"] == diff["unexpected"] == 1, diff["outputs"]
        [example] = diff["outputs"]["topics"][0]["examples"]
        assert example.startswith(repr(word)), example

        # Input still arriving, not processed yet: the diff says what is behind.
        produce(bootstrap, topic, word_count_lines(800, seed=43), partitions=PARTITIONS)
        code, diff = _cli(["upgrade", "diff", *versions, "--json", *common], capsys)
        assert code == 1 and not diff["aligned"] and diff["behind"], diff

        code, out = _cli(
            ["upgrade", "cutover", *versions, "--shadow", "--stop-old", "--json", *common],
            capsys,
        )
        assert code == 0 and out["old_stop"].startswith("stopped gracefully"), out
        assert old.wait(60) is not None
        root = state_root(v1.overrides["state_dir"], v2.app_id)
        assert active_override(root, v2.app_id)[0] is True
        produce(bootstrap, topic, word_count_lines(500, seed=44), partitions=PARTITIONS)
        _caught_up(v2_status, _last_batch(v2_status))
        new.terminate()  # a graceful stop: every task commits what it holds
        assert new.wait(120) == 0
        v2.run_to_completion(1)  # then drain what came since, and stop
    finally:
        old.kill9()
        if new is not None:
            new.kill9()

    code, record = _cli(["drill", "--app", str(v2.spec_path), "--spark", "--json", *common], capsys)
    assert code == 0 and record["passed"], record["failures"]
    assert record["checks"]["spark"] == "pass", record["checks"]

    takeover = read_takeover(takeover_path(root))
    first = dict(takeover.floors[0][topic])
    expected = v2_ref.recompute(read_topic(bootstrap, topic), upgraded_at=first)
    entries = read_store(v2.settings, v2.spec.build_topology(), "word-counts", PARTITIONS)
    assert {w: e["count"] for w, e in entries.items()} == {
        w: e["count"] for w, e in expected.counts.items()
    }
