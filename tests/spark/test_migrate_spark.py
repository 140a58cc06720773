"""``migrate_app`` on Spark (local[2]): one Spark task per stream task, the same result as
the local loop — v2's stores, restored from v2's changelogs alone, hold every v1 value
migrated, at v1's batch id and source offsets."""

from __future__ import annotations

import json
import uuid

from statekeeper.app.spec import load_app_spec
from statekeeper.app.topics import prepare_topics
from statekeeper.cli import main
from statekeeper.kafka.admin import ensure_topic
from statekeeper.migration import migrate_app
from statekeeper.worker.task_runner import close_worker_services
from tests.integration.test_state_migration import (
    _produce_words,
    _read_back,
    _run_v1,
    _settings,
    _write_specs,
)

PARTITIONS = 3


def test_migrate_on_spark(spark, broker, admin, topic_name, tmp_path, capsys) -> None:
    ensure_topic(admin, topic_name, PARTITIONS)
    old_app, new_app = (f"mig-s{v}-{uuid.uuid4().hex[:6]}" for v in ("1", "2"))
    v1_path, v2_path = _write_specs(tmp_path / "app", topic_name, old_app, new_app)
    v1_spec, v2_spec = load_app_spec(v1_path), load_app_spec(v2_path)
    v1_settings = _settings(broker, tmp_path / "state", old_app)
    v2_settings = _settings(broker, tmp_path / "state", new_app)
    sent = _produce_words(
        broker.bootstrap_servers, topic_name, 60, vocabulary=11, partitions=PARTITIONS
    )
    v1 = v1_spec.build_topology()
    prepare_topics(admin, v1, old_app, 30.0)
    ends = [sum(c.values()) for c in sent]
    _run_v1(v1_settings, v1, topic_name, 3, [(0, end) for end in ends], snapshot="req-1")
    close_worker_services()

    report = migrate_app(
        v1_spec,
        v2_spec,
        old_settings=v1_settings,
        new_settings=v2_settings,
        spark_context=spark.sparkContext,
    )
    assert report.on_spark
    assert sorted(t.task_id for t in report.tasks) == [f"0_{p}" for p in range(PARTITIONS)]
    assert all(t.batch_id == 3 and t.snapshots for t in report.tasks)
    v2 = v2_spec.build_topology()
    for p in range(PARTITIONS):
        stores, batch, offsets = _read_back(
            v2_settings.model_copy(update={"state_dir": tmp_path / "fresh"}), v2, f"0_{p}"
        )
        assert stores["counts"] == {w: {"count": n, "from": "v1"} for w, n in sent[p].items()}
        assert (batch, offsets) == (3, {f"{topic_name}:{p}": ends[p]})

    # The command runs on the active session (it does not stop a session it did not make).
    v3_path = v2_path.with_name("v3.yaml")
    v3_path.write_text(v2_path.read_text().replace(new_app, f"{new_app}-3"))
    code = main(
        ["upgrade", "migrate", "--app", str(v3_path), "--from", str(v1_path), "--json"]
        + ["--bootstrap", broker.bootstrap_servers, "--set", f"state_dir={tmp_path / 'state'}"]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    payload = json.loads(out.out)
    assert payload["on_spark"] and len(payload["tasks"]) == PARTITIONS
    assert spark.sparkContext.parallelize([1]).count() == 1  # still running
