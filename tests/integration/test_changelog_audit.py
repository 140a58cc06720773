"""Changelog audits against the embedded broker: a too-short window retention fails and
``--fix`` corrects it; a healthy app audits ok; absent configs are unknown, not failures."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from statekeeper.app.topics import prepare_topics
from statekeeper.changelog.records import MARKER_KEY, changelog_topic
from statekeeper.cli import main
from statekeeper.kafka.admin import ensure_topic
from statekeeper.ops.audit.changelog_audit import audit_changelogs
from statekeeper.ops.audit.contents import measure_changelog
from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.stores.time_windows import TimeWindows

SIZE, GRACE, RETENTION = 10_000, 2_000, 100_000
TOPOLOGY_FILE = f"""
from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.stores.time_windows import TimeWindows


def build(input_topic):
    b = StreamsBuilder()
    stream = b.stream(input_topic, key_serde="str", value_serde="str")
    stream.group_by_key().count(Materialized.as_("totals"))
    stream.group_by_key().windowed_by(TimeWindows.tumbling({SIZE}, grace_ms={GRACE})).count(
        Materialized.as_("windows").with_retention({RETENTION})
    )
    return b.build()
"""


def _topology(input_topic: str):
    b = StreamsBuilder()
    stream = b.stream(input_topic, key_serde="str", value_serde="str")
    stream.group_by_key().count(Materialized.as_("totals"))
    stream.group_by_key().windowed_by(TimeWindows.tumbling(SIZE, grace_ms=GRACE)).count(
        Materialized.as_("windows").with_retention(RETENTION)
    )
    return b.build()


@pytest.fixture
def app(admin, broker):
    """A prepared app (source with 2 partitions, changelogs created as the app creates them)."""
    app_id = f"audit-{uuid.uuid4().hex[:8]}"
    source = f"{app_id}-input"
    ensure_topic(admin, source, 2)
    topology = _topology(source)
    prepare_topics(admin, topology, app_id, timeout_s=10)
    return app_id, source, topology


def _set_config(admin, topic: str, key: str, value: str) -> None:
    resource = ConfigResource(
        "topic",
        topic,
        incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=10)


def test_healthy_app_audits_ok_and_measures_contents(app, broker) -> None:
    app_id, _, topology = app
    topic = changelog_topic(app_id, "totals")
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(30):
        producer.produce(topic, key=f"k{i % 10}".encode(), value=b"1", partition=i % 2)
    producer.produce(topic, key=b"k1", value=None, partition=1)
    producer.produce(topic, key=MARKER_KEY, value=b"{}", partition=0)
    producer.flush(10)

    report = audit_changelogs(topology, app_id, broker.bootstrap_servers, timeout_s=10)
    assert report.verdict == "ok", [t.reasons() for t in report.topics]
    by_store = {t.store: t for t in report.topics}
    assert {"totals", "windows"} <= set(by_store)
    totals = by_store["totals"]
    assert totals.contents is not None
    assert totals.contents.records == 32 and not totals.contents.sampled
    assert totals.contents.distinct_keys == 10
    assert totals.contents.tombstones == 1 and totals.contents.markers == 1
    assert totals.full_restore_seconds is not None and totals.full_restore_seconds > 0

    # A bounded read samples long partitions and says so.
    sample = measure_changelog(broker.bootstrap_servers, topic, 2, max_records_per_partition=5)
    assert sample.sampled and sample.records_read == 10 and sample.records >= 10


def test_absent_config_is_unknown_not_a_failure(app, broker, admin) -> None:
    app_id, source, topology = app
    # A changelog created by hand without configs: the embedded broker reports none.
    bare_app = f"{app_id}-bare"
    ensure_topic(admin, changelog_topic(bare_app, "windows"), 2)
    report = audit_changelogs(topology, bare_app, broker.bootstrap_servers, timeout_s=10)
    windows = next(t for t in report.topics if t.store == "windows")
    assert windows.verdict == "ok", windows.reasons()
    unknown = {f.aspect for f in windows.findings if f.severity == "unknown"}
    assert {"cleanup.policy", "retention.ms"} <= unknown
    # The changelogs never created are reported, not failed.
    totals = next(t for t in report.topics if t.store == "totals")
    assert not totals.exists and totals.verdict == "warn"
    assert "missing while other changelogs" in totals.reasons()[0]


def test_an_app_that_never_started_is_not_created_yet_not_a_warning(app, broker) -> None:
    _, _, topology = app
    report = audit_changelogs(topology, "never-started", broker.bootstrap_servers, timeout_s=10)
    assert report.topics and report.verdict == "ok"
    for topic in report.topics:
        assert not topic.exists
        assert [(f.severity, f.message) for f in topic.findings] == [
            ("info", "not created yet (the app creates it when it first starts)")
        ]


def test_short_window_retention_fails_and_fix_corrects_it(app, broker, admin) -> None:
    app_id, _, topology = app
    topic = changelog_topic(app_id, "windows")
    _set_config(admin, topic, "retention.ms", str(SIZE + GRACE - 1))

    report = audit_changelogs(topology, app_id, broker.bootstrap_servers, timeout_s=10)
    assert report.verdict == "fail"
    bad = next(t for t in report.topics if t.topic == topic)
    assert bad.verdict == "fail"
    assert any("retention.ms" in r and "size + grace" in r for r in bad.reasons())
    assert all(t.verdict == "ok" for t in report.topics if t.topic != topic)

    fixed = audit_changelogs(topology, app_id, broker.bootstrap_servers, fix=True, timeout_s=10)
    assert fixed.verdict == "ok", [t.reasons() for t in fixed.topics]
    assert [(c.topic, c.key, c.before) for c in fixed.applied] == [
        (topic, "retention.ms", str(SIZE + GRACE - 1))
    ]
    assert int(fixed.applied[0].after) >= RETENTION
    assert audit_changelogs(topology, app_id, broker.bootstrap_servers).verdict == "ok"


def test_cli_exit_codes_and_json(app, broker, admin, tmp_path: Path, capsys) -> None:
    app_id, source, _ = app
    (tmp_path / "topo.py").write_text(TOPOLOGY_FILE)
    spec = tmp_path / "app.yaml"
    spec.write_text(
        f"application_id: {app_id}\ntopology: topo.py:build\nparams: {{input_topic: {source}}}\n"
    )
    topic = changelog_topic(app_id, "totals")
    _set_config(admin, topic, "cleanup.policy", "delete")
    argv = ["audit", "changelogs", "--app", str(spec), "--bootstrap", broker.bootstrap_servers]

    assert main([*argv, "--json"]) == 1
    payload = json.loads(capsys.readouterr().out)
    assert payload["verdict"] == "fail"
    assert payload["restore_rate_is_default"] is True

    assert main([*argv, "--fix"]) == 0
    out = capsys.readouterr().out
    assert f"{topic}: cleanup.policy delete -> compact" in out

    assert main(["audit", "changelogs", "--app", str(tmp_path / "missing.yaml")]) == 2
    assert "cannot read app spec" in capsys.readouterr().err


def test_forecast_from_the_newest_snapshot_and_trim_refused_here(
    admin, broker, tmp_path: Path, capsys, monkeypatch
) -> None:
    """Snapshot + tail forecast from the manifests' markers, the app's measured restore rate,
    cleaner tuning reported as not applicable, and --trim refused on the embedded broker
    without ever calling DeleteRecords."""
    from confluent_kafka.admin import AdminClient

    from .spec_apps import spec_app_with_state

    spec, app_id = spec_app_with_state(
        admin, broker, tmp_path, prefix="audit-fc", entries=300, batch_id=0
    )
    assert main(["snapshot", "create", "--app", str(spec), "--json"]) == 0
    capsys.readouterr()
    # A tail after the snapshots' markers: 40 records on partition 0 of totals' changelog.
    topic = changelog_topic(app_id, "totals")
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(40):
        producer.produce(topic, key=f"user-0-{i}".encode(), value=b"\0" * 8, partition=0)
    producer.flush(10)
    # The app's own restores, as its status document lists them: 60,000 records in 0.2 s.
    status = tmp_path / "state" / app_id / "status.json"
    status.write_text(
        json.dumps({"tasks": {"0_0": {"restore": [{"records": 60_000, "seconds": 0.2}]}}})
    )

    argv = ["audit", "changelogs", "--app", str(spec), "--json"]
    assert main(argv) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["broker"] == "tansu" and payload["measured_with"] == "python"
    assert payload["restore_rate_source"]["source"] == "measured"
    assert payload["restore_rate_records_per_s"] == pytest.approx(300_000)
    totals = next(t for t in payload["topics"] if t["store"] == "totals")
    forecast = totals["forecast"]
    assert forecast["partitions_with_snapshot"] == 2
    # 300 records + 1 marker per partition, then the 40-record tail on partition 0.
    assert forecast["full_records"] == 2 * 301 + 40
    assert forecast["tail_records"] == 40 == forecast["fresh_snapshot_cut_records"]
    assert forecast["snapshot_cut_records"] == 2 * 301
    assert forecast["full_restore_seconds"] == pytest.approx(642 / 300_000, abs=1e-4)
    assert forecast["snapshot_tail_seconds"] == pytest.approx(40 / 300_000, abs=1e-4)
    compaction = [f for f in totals["findings"] if f["aspect"] == "compaction"]
    assert compaction and "does not compact" in compaction[0]["message"]
    assert not any(f["fix"] for f in totals["findings"])  # nothing to tune here

    def never(*_args, **_kwargs):
        raise AssertionError("DeleteRecords called on the embedded broker")

    monkeypatch.setattr(AdminClient, "delete_records", never)
    assert main([*argv, "--trim"]) == 2
    captured = capsys.readouterr()
    assert "does not support DeleteRecords" in captured.err
    trim = json.loads(captured.out)["trim"]
    assert trim["refused"] and trim["actions"] == [] and json.loads(captured.out)["trimmed"] == {}
