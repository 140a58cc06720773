"""Drill reports an operator can act on, against the embedded broker: mismatching keys with
their restored, recomputed and live values; RPO from the commits made after the restore;
errored drills recorded; Data Docs without remote assets.

The live app is test_drill's (a count ``totals`` and a windowed count ``windows`` over a
2-partition source, two committed batches, a snapshot after the first).
"""

from __future__ import annotations

import json
import re
import shutil
import struct
from pathlib import Path

from confluent_kafka import Producer

from statekeeper.changelog.records import RESERVED_KEY_PREFIX, changelog_topic
from statekeeper.cli import main
from statekeeper.kafka.adapter import consumer_config, producer_config
from statekeeper.kafka.model import OffsetRange, tp_key
from statekeeper.kafka.offsets import log_end_offsets
from statekeeper.kafka.range_reader import read_ranges
from statekeeper.ops.drill import DrillHistory, history_path, run_drill
from statekeeper.processing.output_producer import OutputProducer
from statekeeper.processing.stream_task import StreamTask
from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotStorage
from statekeeper.state.environment import StateEnvironment

from .test_changelog_audit import _topology
from .test_drill import RECORDS, TIMEOUT, LiveApp, _drill, _live_app, _write_spec

#: An asset a browser would fetch from another host: a tag's src/href, a CSS url() or import.
REMOTE = re.compile(
    r"<(?:script|link|img|iframe|source|embed|video|audio)\b[^>]*\b(?:src|href|srcset)\s*=\s*"
    r"[\"']?(?:https?:)?//|url\(\s*[\"']?(?:https?:)?//|@import\s+[\"']?(?:https?:)?//",
    re.I,
)


def _count(raw: bytes) -> str:
    return str(struct.unpack(">q", raw)[0])


def _copy_with_damage_in_place(app: LiveApp, broker, tmp_path: Path) -> tuple[Path, dict]:
    """A second app whose changelogs are record-for-record copies of the live app's (same
    offsets, headers), except that in ``totals`` partition 0 one value of the last batch is
    altered to 999 and another key's last value is turned into a tombstone; its live state
    directory is a copy of the live app's, so it holds the right values. Returns the spec and
    ``{key: (restored, right value)}`` of the damaged keys."""
    copy_id = f"{app.app_id}-copy"
    spec = _write_spec(tmp_path, copy_id, app.source, broker)
    settings = load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        state_dir=app.state_dir,
        application_id=copy_id,
    )
    env = StateEnvironment(settings)
    env.ensure_changelogs(app.specs(), 2)
    env.close()
    conf = consumer_config(broker.bootstrap_servers)
    ends = log_end_offsets(conf, app.changelogs(), TIMEOUT)
    logs = read_ranges(conf, [OffsetRange(t, p, 0, ends[(t, p)]) for t, p in ends], TIMEOUT)
    totals = logs[tp_key(changelog_topic(app.app_id, "totals"), 0)]
    data = [r for r in totals if not r.key.startswith(RESERVED_KEY_PREFIX)]
    dropped, altered = data[-1], data[-2]  # both of the last batch: nothing supersedes them
    producer = Producer(producer_config(broker.bootstrap_servers))
    for (topic, partition), _ in ends.items():
        store = topic.removeprefix(f"{app.app_id}-").removesuffix("-changelog")
        for r in logs[tp_key(topic, partition)]:
            value = r.value
            if r is altered:
                value = struct.pack(">q", 999)
            elif r is dropped:
                value = None
            producer.produce(
                changelog_topic(copy_id, store),
                value,
                r.key,
                partition=partition,
                headers=list(r.headers) or None,
            )
    assert producer.flush(TIMEOUT) == 0
    for task in ("0_0", "0_1"):
        shutil.copytree(app.state_dir / app.app_id / task, app.state_dir / copy_id / task)
    damaged = {
        altered.key.decode(): ("999", _count(altered.value)),
        dropped.key.decode(): (None, _count(dropped.value)),
    }
    return spec, damaged


def test_a_failed_truth_check_shows_restored_recomputed_and_live_values(
    admin, broker, tmp_path, capsys
):
    app = _live_app(admin, broker, tmp_path)
    spec, damaged = _copy_with_damage_in_place(app, broker, tmp_path)
    report = tmp_path / "report"
    argv = ["drill", "--app", str(spec), "--report-dir", str(report), "--from-snapshot", "none"]
    assert main(argv) == 1
    out = capsys.readouterr().out

    record = json.loads((report / "record.json").read_text())
    assert record["status"] == "fail"
    truth = {(s["task"], s["store"]): s["checks"]["truth"] for s in record["stores"]}
    bad = truth[("0_0", "totals")]
    assert bad["status"] == "fail" and sorted(bad["examples"]) == sorted(damaged)
    assert {m["key"]: m for m in bad["mismatches"]} == {
        key: {"key": key, "restored": restored, "recomputed": right, "live": right}
        for key, (restored, right) in damaged.items()
    }
    assert all(c["mismatches"] == [] for k, c in truth.items() if k != ("0_0", "totals"))
    # The command names each key with its values.
    for key, (restored, right) in damaged.items():
        shown = "absent" if restored is None else restored
        assert f"{key}: restored {shown}, recomputed {right}, live {right}" in out
    html = (report / "report.html").read_text()
    table = html[html.index("Mismatching keys") :]
    assert "<th>Restored</th><th>Recomputed</th><th>Live</th>" in table
    assert all(key in table for key in damaged) and "999" in table and "absent" in table


def _commit_another_batch(app: LiveApp, extra: int) -> None:
    """The live app goes on: ``extra`` more source records on partition 0, processed and
    committed by task 0_0 as batch 2."""
    producer = Producer(producer_config(app.bootstrap))
    for i in range(extra):
        producer.produce(app.source, b"x", f"user-{2 * i}".encode(), partition=0, timestamp=25_000)
    assert producer.flush(TIMEOUT) == 0
    settings = load_settings(
        bootstrap_servers=app.bootstrap, state_dir=app.state_dir, application_id=app.app_id
    )
    topology = _topology(app.source)
    env = StateEnvironment(settings)
    outputs = OutputProducer(app.bootstrap)
    start = RECORDS // 2
    try:
        with env.task("0_0", 0, topology.store_specs(0)) as task:
            conf = consumer_config(app.bootstrap)
            records = read_ranges(conf, [OffsetRange(app.source, 0, start, start + extra)], TIMEOUT)
            StreamTask(topology, 0, 0, task, outputs, app.app_id).process_batch(
                2, 1_000_002, records
            )
            outputs.flush(TIMEOUT)
            task.commit(2, {tp_key(app.source, 0): start + extra})
    finally:
        outputs.close()
        env.close()


def test_rpo_leads_with_the_records_committed_after_the_restored_marker(admin, broker, tmp_path):
    app = _live_app(admin, broker, tmp_path)
    snaps = (tmp_path / "snaps").as_uri()
    settings = load_settings(
        bootstrap_servers=app.bootstrap,
        state_dir=app.state_dir,
        application_id=app.app_id,
        snapshot_url=snaps,
    )
    extra = 6

    def say(line: str) -> None:
        if line.startswith("restored "):  # between the sandbox restore and the RPO figures
            _commit_another_batch(app, extra)

    record = run_drill(
        settings,
        _topology(app.source),
        SnapshotStorage(snaps, app.app_id),
        report_dir=tmp_path / "report",
        say=say,
    )
    conf = consumer_config(app.bootstrap)
    stores = {(s.task, s.store): s for s in record.stores}
    expected = {}
    for (task, store), drill in stores.items():
        topic, partition = changelog_topic(app.app_id, store), int(task[-1])
        end = log_end_offsets(conf, [(topic, partition)], TIMEOUT)[(topic, partition)]
        after = read_ranges(
            conf, [OffsetRange(topic, partition, drill.marker_offset + 1, end)], TIMEOUT
        ).get(tp_key(topic, partition), [])
        expected[(task, store)] = sum(1 for r in after if not r.key.startswith(RESERVED_KEY_PREFIX))
        assert drill.changelog_records_behind == end - drill.marker_offset - 1
    assert {k: s.committed_records_behind for k, s in stores.items()} == expected
    assert expected[("0_0", "totals")] > 0 and expected[("0_1", "totals")] == 0
    assert record.committed_records_behind == sum(expected.values())
    # Markers and the new owner's begin record are offsets, not committed records.
    assert record.changelog_records_behind > record.committed_records_behind
    assert record.source_records_behind == extra
    assert record.snapshot_age_s is not None
    html = Path(record.report_html).read_text()
    rpo = html[html.index("Recovery point (RPO)") : html.index("Recovery time (RTO)")]
    assert rpo.index("Committed records behind the live head") < rpo.index("Snapshot age")
    assert f"<b>{record.committed_records_behind}</b>" in rpo


def test_errored_drills_are_recorded_and_data_docs_work_offline(
    admin, broker, tmp_path, capsys, monkeypatch
):
    app = _live_app(admin, broker, tmp_path)
    history = DrillHistory(history_path(app.state_dir))

    # Bad input: exit 2, and the drill is in the record, the history and its report.
    bad_id = tmp_path / "bad-id"
    argv = ["drill", "--app", str(app.spec), "--json"]
    assert main([*argv, "--from-snapshot", "no-such-id", "--report-dir", str(bad_id)]) == 2
    out = capsys.readouterr()
    record = json.loads(out.out)
    assert record["status"] == "error" and record["passed"] is False
    assert "no snapshot 'no-such-id'" in record["error"]
    assert "statekeeper: error: no snapshot 'no-such-id'" in out.err
    assert json.loads((bad_id / "record.json").read_text())["drill_id"] == record["drill_id"]
    assert "The drill could not finish" in (bad_id / "report.html").read_text()

    # A failure inside the drill: recorded with what it found before.
    def boom(*_args, **_kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("statekeeper.ops.drill.drill.run_quality", boom)
    assert main([*argv, "--report-dir", str(tmp_path / "boom")]) == 2
    out = capsys.readouterr()
    monkeypatch.undo()
    record = json.loads(out.out)
    assert record["status"] == "error" and record["error"] == "RuntimeError: boom"
    assert "Traceback" in out.err and "statekeeper: error: RuntimeError: boom" in out.err
    assert record["rto_s"] > 0 and record["stores"]
    assert {s["checks"]["truth"]["status"] for s in record["stores"]} == {"pass", "skipped"}

    # A healthy drill after them: the trend shows all three.
    report = tmp_path / "healthy"
    code, healthy = _drill(capsys, "--app", str(app.spec), "--report-dir", str(report))
    assert code == 0 and healthy["status"] == "pass", healthy["failures"]
    rows = history.rows(app.app_id)
    assert [r.outcome for r in rows] == ["error", "error", "pass"]
    assert [r.status for r in rows] == ["error", "error", "pass"]
    html = (report / "report.html").read_text()
    assert html.count("<circle") == 3 and html.count('fill="#d98200"') == 2

    # Data Docs: no asset from another host, and a static index that reaches every page.
    docs = report / "data_docs"
    pages = sorted(docs.rglob("*.html"))
    assert len(pages) == 1 + 2 * len(healthy["stores"])  # index, a validation and a suite each
    for page in [*pages, report / "report.html"]:
        text = page.read_text()
        assert REMOTE.findall(text) == [], page
        assert "<script" not in text, page
    for css in docs.rglob("*.css"):
        assert REMOTE.findall(css.read_text()) == [], css
    index = (docs / "index.html").read_text()
    links = re.findall(r'href="([^"]+)"', index)
    assert len(links) == len(pages) - 1
    assert all((docs / link).is_file() for link in links)
    assert index.count('class="pass"') == len(healthy["stores"])
