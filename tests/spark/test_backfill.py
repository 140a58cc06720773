"""``statekeeper backfill`` on Spark (local[2], the tests' session), then the stream.

word_count's history is backfilled up to explicit offsets (records after them exist and must
not be counted), continued by a second backfill up to "now" while more input arrives (what
arrives after its --until must not be counted either), then the ordinary stream runs over
the rest. After each step the store and the deduplicated outputs equal the reference
recomputation of exactly the records before the step's end: nothing counted twice, nothing
skipped. A second app starts fresh ``--from`` a timestamp (the embedded broker's wrong
answer to a lookup by time is caught and the partitions scanned).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from spark_apps.word_count.generator import word_count_lines
from spark_apps.word_count.reference import recompute
from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.app.store_reader import read_store
from statekeeper.cli import main
from statekeeper.generate.producer import produce
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.processing.output_reader import read_deduped
from tests.e2e.harness import AppUnderTest

pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("backfill_spark")]

PARTITIONS = 4
TP = tuple[str, int]


def _counts_below(bootstrap: str, topic: str, ends: Mapping[TP, int]) -> dict[str, int]:
    """The reference counts of the records of ``topic`` below ``ends`` (all when empty)."""
    records = read_topic(bootstrap, topic)
    if ends:
        records = {p: [r for r in rs if r.offset < ends[(topic, p)]] for p, rs in records.items()}
    return recompute(records).counts


def _latest_outputs(bootstrap: str, topic: str) -> dict[str, int]:
    latest: dict[str, int] = {}
    for record in read_deduped(bootstrap, topic):
        latest[record.key.decode()] = int(record.value)  # type: ignore[union-attr,arg-type]
    return latest


def _ends(bootstrap: str, topic: str) -> dict[TP, int]:
    conf = consumer_config(bootstrap, group_id="backfill-test")
    return log_end_offsets(conf, [(topic, p) for p in range(PARTITIONS)])


def _offsets(report: dict[str, Any], key: str, topic: str) -> dict[TP, int]:
    return {(topic, int(p)): o for p, o in report[key][topic].items()}


def _backfill(app: AppUnderTest, capsys: Any, *argv: str) -> tuple[int, dict[str, Any], str]:
    capsys.readouterr()
    code = main(["backfill", *app.cli_args(), *argv, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


def _app(bootstrap: str, workdir: Path, topic: str, out: str) -> AppUnderTest:
    return AppUnderTest.create(
        "word_count",
        bootstrap,
        workdir,
        uuid.uuid4().hex[:6],
        {"input_topic": topic, "output_topic": out},
        trigger_interval_ms=100,
        commit_interval_ms=1_000,
    )


def test_backfill_then_the_stream_continue_exactly(spark, broker, tmp_path, capsys) -> None:
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    topic, out = f"bf-lines-{suffix}", f"bf-counts-{suffix}"
    lines = list(word_count_lines(12_000, seed=7))
    produce(bootstrap, topic, lines[:4_000], partitions=PARTITIONS)
    history = _ends(bootstrap, topic)
    produce(bootstrap, topic, lines[4_000:6_000], partitions=PARTITIONS)  # after --until
    app = _app(bootstrap, tmp_path / "wc", topic, out)
    topology = app.spec.build_topology()

    # 1. Up to explicit offsets: the records after them are not counted.
    until = json.dumps({topic: {str(p): o for (_, p), o in sorted(history.items())}})
    started = time.monotonic()
    code, report, err = _backfill(app, capsys, "--until", until, "--max-records-per-batch", "1500")
    seconds = time.monotonic() - started
    assert code == 0, err
    print(f"backfill 1: {json.dumps(report)} ({seconds:.1f} s with the CLI)")
    assert _offsets(report, "until", topic) == history
    assert _offsets(report, "stream_continues_at", topic) == history
    assert report["source_records"] == sum(history.values()) == 4_000
    assert report["batches"] >= 3 and report["tasks"] == 2 * PARTITIONS
    assert "a fresh app, from earliest" in report["start"]
    assert "left below --until" in err and "a fresh app, from earliest" in err
    snapshot = report["snapshot"]
    assert snapshot["state"] == "uploaded", snapshot
    assert sorted(snapshot["snapshot_ids"]) == [f"1_{p}" for p in range(PARTITIONS)]
    expected = _counts_below(bootstrap, topic, history)
    assert read_store(app.settings, topology, "word-counts", PARTITIONS) == expected
    assert _latest_outputs(bootstrap, out) == expected

    # A timestamp cannot move an app that has run.
    code, _, err = _backfill(app, capsys, "--from", "1700000000000")
    assert code == 2 and len(err.splitlines()) == 1
    assert "--from 1700000000000: only a fresh app starts at a timestamp" in err

    # 2. Continued up to now while input keeps arriving: what arrives after is not counted.
    def feed() -> None:
        for start in range(6_000, 9_000, 300):
            produce(bootstrap, topic, lines[start : start + 300], partitions=PARTITIONS)
            time.sleep(0.3)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        code, report, err = _backfill(app, capsys, "--no-snapshot")
    finally:
        feeder.join()
    assert code == 0, err
    print(f"backfill 2: {json.dumps(report)}")
    assert "continues the backfill from earliest" in report["start"]
    assert report["snapshot"] is None
    now = _offsets(report, "until", topic)
    assert _offsets(report, "start_offsets", topic) == history
    assert _offsets(report, "stream_continues_at", topic) == now
    assert report["source_records"] == sum(now.values()) - 4_000 >= 2_000
    expected = _counts_below(bootstrap, topic, now)
    assert read_store(app.settings, topology, "word-counts", PARTITIONS) == expected
    assert _latest_outputs(bootstrap, out) == expected
    print(f"records after backfill 2's --until: {9_000 - sum(now.values())}")

    # 3. The stream goes on from there: every record counted exactly once.
    produce(bootstrap, topic, lines[9_000:], partitions=PARTITIONS)
    stream = StatekeeperApp(topology, app.settings, spark_conf=app.spec.spark.conf)
    stream.run(stop_when_idle=True, idle_s=1.0)
    expected = _counts_below(bootstrap, topic, {})
    assert read_store(app.settings, topology, "word-counts", PARTITIONS) == expected
    assert _latest_outputs(bootstrap, out) == expected


def test_backfill_from_a_timestamp_on_a_fresh_app(spark, broker, tmp_path, capsys) -> None:
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    topic, out = f"bf-ts-lines-{suffix}", f"bf-ts-counts-{suffix}"
    lines = list(word_count_lines(3_000, seed=11))
    produce(bootstrap, topic, lines, partitions=PARTITIONS)
    cut = lines[1_200].timestamp_ms
    records = read_topic(bootstrap, topic)
    first = {
        (topic, p): next((r.offset for r in rs if r.timestamp_ms >= cut), len(rs))
        for p, rs in records.items()
    }
    app = _app(bootstrap, tmp_path / "ts", topic, out)
    code, report, err = _backfill(app, capsys, "--from", str(cut), "--no-snapshot")
    assert code == 0, err
    print(f"backfill from {cut}: {json.dumps(report)}")
    assert _offsets(report, "start_offsets", topic) == first
    assert report["source_records"] == 3_000 - sum(first.values())
    from_cut = {p: [r for r in rs if r.offset >= first[(topic, p)]] for p, rs in records.items()}
    expected = recompute(from_cut).counts
    topology = app.spec.build_topology()
    assert read_store(app.settings, topology, "word-counts", PARTITIONS) == expected

    # The stream continues from there; the records before the timestamp stay unread.
    more = list(word_count_lines(500, seed=12, start_ms=lines[-1].timestamp_ms))
    produce(bootstrap, topic, more, partitions=PARTITIONS)
    StatekeeperApp(topology, app.settings, spark_conf=app.spec.spark.conf).run(
        stop_when_idle=True, idle_s=1.0
    )
    records = read_topic(bootstrap, topic)
    from_cut = {p: [r for r in rs if r.offset >= first[(topic, p)]] for p, rs in records.items()}
    assert (
        read_store(app.settings, topology, "word-counts", PARTITIONS) == recompute(from_cut).counts
    )
