"""App versions against a real broker, no Spark: v2 started on the state v1 wrote fails fast
naming the store and the difference; snapshots taken in the worker record the fingerprint."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from confluent_kafka import Producer

from statekeeper.app.lifecycle import AppState
from statekeeper.app.state_version import check_state_at_start
from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.app.topics import prepare_topics, source_partitions
from statekeeper.kafka.adapter import producer_config
from statekeeper.kafka.admin import ensure_topic
from statekeeper.kafka.model import OffsetRange
from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotStorage, list_snapshots
from statekeeper.versions import IncompatibleStateError, TopologyFingerprint, read_recorded
from statekeeper.worker.task_run import TaskRun
from statekeeper.worker.task_runner import _services, run_share, settings_to_json

PARTITIONS = 2


def _topology(topic: str, value_serde: str = "int") -> Any:
    builder = StreamsBuilder()
    builder.stream(topic, key_serde="str", value_serde="str").group_by_key().count(
        Materialized.as_("counts").with_serdes("str", value_serde)
    )
    return builder.build()


def _settings(broker: Any, tmp_path: Any, app: str, **values: Any) -> Any:
    return load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        application_id=app,
        state_dir=tmp_path / "state",
        checkpoint_dir=tmp_path / "ckpt",
        status_port=None,
        # the worker uploads its snapshots: run_share runs here without a driver
        executor_services_process=False,
        **values,
    )


def test_v2_on_v1_state_fails_fast_and_snapshots_record_the_topology(
    broker, admin, topic_name, tmp_path
) -> None:
    ensure_topic(admin, topic_name, PARTITIONS)
    producer = Producer(producer_config(broker.bootstrap_servers))
    for i in range(20):
        producer.produce(topic_name, b"x", f"k{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(15) == 0
    app = f"versions-{uuid.uuid4().hex[:8]}"
    settings = _settings(broker, tmp_path, app)
    v1 = _topology(topic_name)

    # v1 starts (the app's start path up to Spark): its fingerprint is recorded ...
    sources = source_partitions(admin, v1, app, 30.0)
    fingerprint = check_state_at_start(settings, v1, sources)
    assert read_recorded(tmp_path / "state" / app) == fingerprint
    assert fingerprint.source_partitions == {topic_name: PARTITIONS}
    prepare_topics(admin, v1, app, 30.0, sources)
    # ... and a snapshot taken in the worker records it in every manifest.
    runs = [
        TaskRun(
            f"0_{p}",
            0,
            p,
            (OffsetRange(topic_name, p, 0, 10),),
            0,
            0,
            snapshot_request="req-1",
            snapshot_topology=fingerprint.to_json(),
        )
        for p in range(PARTITIONS)
    ]
    settings_json = settings_to_json(settings)
    assert all(r.committed for r in run_share(0, [runs], uuid.uuid4().hex, v1, settings_json))
    assert _services(settings_json).snapshots.uploader.wait_idle(30)
    storage = SnapshotStorage((tmp_path / "snapshots").as_uri(), app, create=False)
    manifests = list_snapshots(storage)
    assert {(m.task, m.store) for m in manifests} == {
        (f"0_{p}", s) for p in range(PARTITIONS) for s in ("counts", "sk-task-state-0")
    }
    assert all(TopologyFingerprint.from_dict(m.topology) == fingerprint for m in manifests)

    # v2 stores counts as JSON: the app fails before Spark, naming the store and the change.
    seen: list[str] = []
    v2 = StatekeeperApp(
        _topology(topic_name, "json"),
        settings,
        listeners=[lambda new, _old: seen.append(new.value)],
    )
    with pytest.raises(IncompatibleStateError, match="store counts: value serde int -> json"):
        v2.run()
    assert v2.state is AppState.ERROR and seen == ["REBALANCING", "ERROR"]
    status = json.loads(settings.status_path().read_text())
    assert "store counts: value serde int -> json" in status["error"]
    assert read_recorded(tmp_path / "state" / app) == fingerprint  # untouched

    # A fresh machine (no state root record): the newest snapshot's fingerprint refuses it too.
    (tmp_path / "state" / app / "topology.json").unlink()
    with pytest.raises(IncompatibleStateError, match=r"the state \(snapshot \S+\) was written"):
        check_state_at_start(settings, _topology(topic_name, "json"), sources)
