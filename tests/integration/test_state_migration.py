"""State migration against a real broker, no Spark (issue 24, item 2): v1 counts words as
ints and commits (one snapshot, then a changelog tail); ``migrate_app`` moves the state to
v2 (counts as JSON through a per-record migration, a new store, a new application id). v2's
stores restored from v2's changelogs alone in a fresh directory hold each v1 value
migrated, and its markers carry v1's batch id and source offsets."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from statekeeper.app.spec import load_app_spec
from statekeeper.app.state_version import check_state_at_start
from statekeeper.app.topics import prepare_topics
from statekeeper.cli import main
from statekeeper.kafka.adapter import producer_config
from statekeeper.kafka.admin import ensure_topic, partition_count
from statekeeper.kafka.model import OffsetRange
from statekeeper.migration import MigrationError, MigrationRefused, StoreAction, migrate_app
from statekeeper.settings import load_settings
from statekeeper.snapshots import SnapshotStorage, list_snapshots
from statekeeper.state.environment import StateEnvironment
from statekeeper.state.task_state_manager import TaskStateManager
from statekeeper.stores.typed import WindowStore
from statekeeper.versions import (
    TopologyFingerprint,
    fingerprint_of,
    read_recorded,
    write_recorded,
)
from statekeeper.worker.task_run import TaskRun
from statekeeper.worker.task_runner import (
    _services,
    close_worker_services,
    run_share,
    settings_to_json,
)

PARTITIONS = 2

TOPOLOGY = """
from statekeeper.processing.dsl import Materialized, StreamsBuilder


def build(topic, value_serde="int", lengths=False):
    builder = StreamsBuilder()
    grouped = builder.stream(topic, key_serde="str", value_serde="str").group_by_key()
    grouped.count(Materialized.as_("counts").with_serdes("str", value_serde))
    if lengths:
        grouped.aggregate(
            lambda: 0,
            lambda _key, line, total: total + len(line),
            Materialized.as_("lengths").with_serdes("str", "int"),
        )
    return builder.build()
"""

MIGRATIONS = """
def counts_v2(key, value):
    if key == "drop-me":
        return None
    return key, {"count": value, "from": "v1"}
"""


def _write_specs(folder: Path, topic: str, old_app: str, new_app: str) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "topology.py").write_text(TOPOLOGY)
    (folder / "migrations.py").write_text(MIGRATIONS)
    v1 = folder / "v1.yaml"
    v1.write_text(
        f"application_id: {old_app}\ntopology: topology.py:build\nparams: {{topic: {topic}}}\n"
    )
    v2 = folder / "v2.yaml"
    v2.write_text(
        f"application_id: {new_app}\ntopology: topology.py:build\n"
        f"params: {{topic: {topic}, value_serde: json, lengths: true}}\n"
        "migrations:\n  counts: {record: migrations.py:counts_v2}\n"
    )
    return v1, v2


def _produce_words(
    bootstrap: str, topic: str, count: int, vocabulary: int, partitions: int = PARTITIONS
) -> list[Counter[str]]:
    """``count`` records keyed ``w<i % vocabulary>`` to partition ``i % partitions``; what
    each partition got, per word."""
    producer = Producer(producer_config(bootstrap))
    sent = [Counter[str]() for _ in range(partitions)]
    for i in range(count):
        word, partition = f"w{i % vocabulary}", i % partitions
        producer.produce(topic, b"x", word.encode(), partition=partition)
        sent[partition][word] += 1
    assert producer.flush(15) == 0
    return sent


def _settings(broker: Any, state_dir: Path, app: str) -> Any:
    return load_settings(
        bootstrap_servers=broker.bootstrap_servers,
        application_id=app,
        state_dir=state_dir,
        checkpoint_dir=state_dir.parent / "ckpt",
        status_port=None,
        # the worker uploads its snapshots: run_share runs here without a driver
        executor_services_process=False,
    )


def _run_v1(
    settings: Any,
    topology: Any,
    topic: str,
    batch_id: int,
    ends: list[tuple[int, int]],
    snapshot: str | None = None,
) -> None:
    runs = [
        TaskRun(
            f"0_{p}",
            0,
            p,
            (OffsetRange(topic, p, start, end),),
            batch_id,
            1_000 * batch_id,
            force_commit=True,
            snapshot_request=snapshot,
        )
        for p, (start, end) in enumerate(ends)
    ]
    settings_json = settings_to_json(settings)
    results = run_share(0, [runs], uuid.uuid4().hex, topology, settings_json)
    assert all(r.committed for r in results if hasattr(r, "committed"))
    if snapshot is not None:
        assert _services(settings_json).snapshots.uploader.wait_idle(30)


def _contents(store: Any) -> dict[Any, Any]:
    """A store's entries; a window store's keyed ``(key, window_start)``."""
    if isinstance(store, WindowStore):
        return {(key, start): value for key, start, value in store.all()}
    return dict(store.all())


def _read_back(settings: Any, topology: Any, task_id: str) -> tuple[dict[str, dict], Any, Any]:
    """Every store of a task restored from its changelogs alone (no snapshot) in a fresh
    state directory, read-only; with the task's committed batch id and source offsets."""
    env = StateEnvironment(settings, read_only=True)
    try:
        task = env.task(task_id, int(task_id.split("_")[1]), topology.store_specs(0))
        task.open()
        try:
            stores = {name: _contents(store) for name, store in task.stores.items()}
            return stores, task.last_batch_id, task.committed_offsets
        finally:
            task.close()
    finally:
        env.close()


def test_migrate_v1_counts_to_v2_json_under_a_new_app_id(
    broker, admin, topic_name, tmp_path, capsys
) -> None:
    ensure_topic(admin, topic_name, PARTITIONS)
    old_app, new_app = (f"mig-{v}-{uuid.uuid4().hex[:6]}" for v in ("v1", "v2"))
    v1_path, v2_path = _write_specs(tmp_path / "app", topic_name, old_app, new_app)
    v1_spec, v2_spec = load_app_spec(v1_path), load_app_spec(v2_path)
    v1_settings = _settings(broker, tmp_path / "state", old_app)
    v2_settings = _settings(broker, tmp_path / "state", new_app)
    v1 = v1_spec.build_topology()

    words = [f"w{i % 7}" for i in range(40)] + ["drop-me"] * 3
    producer = Producer(producer_config(broker.bootstrap_servers))
    sent: list[Counter[str]] = [Counter() for _ in range(PARTITIONS)]
    for word in words:
        partition = hash(word) % PARTITIONS if word != "drop-me" else 0
        producer.produce(topic_name, b"x", word.encode(), partition=partition)
        sent[partition][word] += 1
    assert producer.flush(15) == 0
    ends = [sum(c.values()) for c in sent]

    # v1 runs: batch 4 over the first half (snapshotted), batch 5 over the rest (a changelog
    # tail after the snapshot's marker).
    prepare_topics(admin, v1, old_app, 30.0)
    half = [end // 2 for end in ends]
    _run_v1(v1_settings, v1, topic_name, 4, [(0, h) for h in half], snapshot="req-1")
    _run_v1(v1_settings, v1, topic_name, 5, list(zip(half, ends, strict=True)))
    close_worker_services()  # v1 stops (its task locks go); migrate never needs them
    assert list_snapshots(SnapshotStorage((tmp_path / "snapshots").as_uri(), old_app))

    progress: list[str] = []
    report = migrate_app(
        v1_spec,
        v2_spec,
        old_settings=v1_settings,
        new_settings=v2_settings,
        progress=lambda t: progress.append(t.task_id),
        scratch_root=tmp_path / "scratch",
    )
    assert progress == ["0_0", "0_1"]
    assert {s.store: s.action for s in report.steps} == {
        "counts": StoreAction.MIGRATE,
        "lengths": StoreAction.EMPTY,
        "sk-task-state-0": StoreAction.COPY,
    }
    by_task = {t.task_id: t for t in report.tasks}
    assert by_task["0_0"].stores["counts"].dropped == 1  # drop-me
    assert all(t.batch_id == 5 and t.snapshots for t in report.tasks)
    assert all(t.read_from["counts"].startswith("snapshot ") for t in report.tasks)
    recorded = read_recorded(tmp_path / "state" / new_app)
    assert recorded is not None and recorded.application_id == new_app
    new_snapshots = list_snapshots(SnapshotStorage((tmp_path / "snapshots").as_uri(), new_app))
    assert {(m.task, m.store) for m in new_snapshots} == {
        (f"0_{p}", s) for p in range(PARTITIONS) for s in ("counts", "lengths", "sk-task-state-0")
    }
    assert all(TopologyFingerprint.from_dict(m.topology) == recorded for m in new_snapshots)
    # v2's start check reads the recorded fingerprint and lets it start.
    v2_sources = {topic_name: PARTITIONS}
    assert check_state_at_start(v2_settings, v2_spec.build_topology(), v2_sources) == recorded
    assert not list((tmp_path / "scratch").iterdir())  # scratch copies removed

    v2 = v2_spec.build_topology()
    fresh = tmp_path / "fresh"
    for p in range(PARTITIONS):
        tid = f"0_{p}"
        old_stores, old_batch, old_offsets = _read_back(
            v1_settings.model_copy(update={"state_dir": fresh / "v1"}), v1, tid
        )
        new_stores, new_batch, new_offsets = _read_back(
            v2_settings.model_copy(update={"state_dir": fresh / "v2"}), v2, tid
        )
        assert old_stores["counts"] == {w: n for w, n in sent[p].items()}
        assert new_stores["counts"] == {
            w: {"count": n, "from": "v1"} for w, n in old_stores["counts"].items() if w != "drop-me"
        }
        assert new_stores["lengths"] == {}
        assert new_stores["sk-task-state-0"] == old_stores["sk-task-state-0"]
        assert (
            (new_batch, new_offsets)
            == (old_batch, old_offsets)
            == (5, {f"{topic_name}:{p}": ends[p]})
        )
        counts = by_task[tid].stores["counts"]
        assert (counts.read, counts.written) == (
            len(old_stores["counts"]),
            len(new_stores["counts"]),
        )
        copied = by_task[tid].stores["sk-task-state-0"]  # unchanged: its bytes copied
        assert copied.read == copied.written == len(old_stores["sk-task-state-0"]) > 0

    # Run again (a job that died after some tasks): migrated tasks are left as they are.
    again = migrate_app(v1_spec, v2_spec, old_settings=v1_settings, new_settings=v2_settings)
    assert [t.note for t in again.tasks] == ["migrated already (batch 5): left as it is"] * 2

    # The command, without Spark: a progress line per task, the report as JSON.
    v3_path = v2_path.with_name("v3.yaml")
    v3_path.write_text(v2_path.read_text().replace(new_app, f"{new_app}-3"))
    common = ["--bootstrap", broker.bootstrap_servers, "--set", f"state_dir={tmp_path / 'state'}"]
    code = main(
        [
            "upgrade",
            "migrate",
            "--app",
            str(v3_path),
            "--from",
            str(v1_path),
            "--local",
            "--json",
            *common,
        ]
    )
    out = capsys.readouterr()
    assert code == 0, out.err
    payload = json.loads(out.out)
    assert payload["new_application_id"] == f"{new_app}-3" and not payload["on_spark"]
    assert [t["task"] for t in payload["tasks"]] == ["0_0", "0_1"]
    assert payload["tasks"][0]["stores"]["counts"]["dropped"] == 1
    code = main(
        [
            "upgrade",
            "migrate",
            "--app",
            str(v3_path.with_name("v4.yaml")),
            "--from",
            str(v1_path),
            "--local",
            *common,
        ]
    )
    assert code == 2 and "cannot read app spec" in capsys.readouterr().err
    v4_path = v2_path.with_name("v4.yaml")
    v4_path.write_text(v3_path.read_text().replace(f"{new_app}-3", f"{new_app}-4"))
    code = main(
        ["upgrade", "migrate", "--app", str(v4_path), "--from", str(v1_path), "--local", *common]
    )
    assert code == 0
    assert "task 0_1: batch 5, counts " in capsys.readouterr().err


def test_refusals_before_anything_is_written(broker, admin, topic_name, tmp_path, capsys) -> None:
    ensure_topic(admin, topic_name, PARTITIONS)
    app = f"mig-same-{uuid.uuid4().hex[:6]}"
    v1_path, v2_path = _write_specs(tmp_path / "app", topic_name, app, app)
    v1_spec, v2_spec = load_app_spec(v1_path), load_app_spec(v2_path)
    settings = _settings(broker, tmp_path / "state", app)
    with pytest.raises(MigrationError, match="both application id"):
        migrate_app(v1_spec, v2_spec, old_settings=settings, new_settings=settings)

    # The old app never ran: no changelog to read.
    other_path = tmp_path / "app" / "v2-other.yaml"
    other_path.write_text(v2_path.read_text().replace(app, f"{app}-3"))
    other_spec, other = load_app_spec(other_path), _settings(broker, tmp_path / "state", f"{app}-3")
    # The state records that another topology wrote it: --from is not the version that ran.
    recorded = write_recorded(
        tmp_path / "state" / app, fingerprint_of(v2_spec.build_topology(), app)
    )
    with pytest.raises(
        MigrationRefused,
        match=r"the old version's spec is not the topology that wrote its state "
        r"\(\S+topology\.json\): store counts: value serde json -> int: give --from the spec",
    ):
        migrate_app(v1_spec, other_spec, old_settings=settings, new_settings=other)
    recorded.unlink()
    with pytest.raises(
        MigrationRefused, match=f"store counts: the old app has no changelog {app}-counts-changelog"
    ):
        migrate_app(v1_spec, other_spec, old_settings=settings, new_settings=other)

    # v2 without its migration: counts needs one.
    bare = tmp_path / "app" / "v2-bare.yaml"
    bare.write_text(v2_path.read_text().split("migrations:")[0].replace(app, f"{app}-2"))
    with pytest.raises(
        MigrationRefused, match="store counts: value serde int -> json: needs a migration"
    ):
        migrate_app(
            v1_spec,
            load_app_spec(bare),
            old_settings=settings,
            new_settings=_settings(broker, tmp_path / "state", f"{app}-2"),
        )
    # The command says so in one line, exit code 1, before Spark would start.
    command = ["upgrade", "migrate", "--app", str(bare), "--from", str(v1_path)]
    code = main([*command, "--json", "--bootstrap", broker.bootstrap_servers])
    out = capsys.readouterr()
    assert code == 1 and json.loads(out.out)["code"] == 1
    assert out.err.count("\n") == 1 and "needs a migration and none is declared" in out.err

    # The old changelogs were made when the source had 1 partition (and no fingerprint
    # recorded the count): the source was repartitioned since, and this subtopology counts
    # the source's keys directly: no re-keying can be exact; refused.
    for store in ("counts", "sk-task-state-0"):
        ensure_topic(admin, f"{app}-{store}-changelog", 1)
    with pytest.raises(
        MigrationRefused,
        match=f"subtopology 0 has state and reads source topic\\(s\\) {topic_name} directly, "
        "whose partition count changed \\(1 -> 2 tasks\\)",
    ):
        migrate_app(v1_spec, other_spec, old_settings=settings, new_settings=other)
    assert partition_count(admin, f"{app}-3-counts-changelog", 10) is None  # nothing created


WINDOWED = """
from statekeeper.processing.dsl import Materialized, StreamsBuilder
from statekeeper.stores.time_windows import TimeWindows


def build(topic, retention_ms=3_600_000):
    builder = StreamsBuilder()
    grouped = builder.stream(topic, key_serde="str", value_serde="str").group_by_key()
    grouped.count(Materialized.as_("counts").with_serdes("str", "int"))
    grouped.windowed_by(TimeWindows.tumbling(60_000)).count(
        Materialized.as_("per-minute").with_serdes("str", "int").with_retention(retention_ms)
    )
    return builder.build()
"""

BY_PREFIX = """
def by_prefix(items):
    totals = {}
    for word, count in items:
        totals[word[:2]] = totals.get(word[:2], 0) + count
    return sorted(totals.items())


def windows_times_ten(key, value):
    word, window_start = key
    return (word, window_start), value * 10
"""


def test_whole_store_and_window_store_migrations_and_a_task_that_never_committed(
    broker, admin, topic_name, tmp_path
) -> None:
    ensure_topic(admin, topic_name, PARTITIONS)
    old_app, new_app = (f"mig-w{v}-{uuid.uuid4().hex[:6]}" for v in ("1", "2"))
    folder = tmp_path / "app"
    folder.mkdir()
    (folder / "topology.py").write_text(WINDOWED)
    (folder / "migrations.py").write_text(BY_PREFIX)
    (folder / "v1.yaml").write_text(
        f"application_id: {old_app}\ntopology: topology.py:build\nparams: {{topic: {topic_name}}}\n"
    )
    (folder / "v2.yaml").write_text(
        f"application_id: {new_app}\ntopology: topology.py:build\n"
        f"params: {{topic: {topic_name}, retention_ms: 7200000}}\n"
        "migrations:\n  counts: {store: migrations.py:by_prefix}\n"
        "  per-minute: {record: migrations.py:windows_times_ten}\n"
    )
    v1_spec, v2_spec = load_app_spec(folder / "v1.yaml"), load_app_spec(folder / "v2.yaml")
    v1_settings = _settings(broker, tmp_path / "state", old_app)
    v2_settings = _settings(broker, tmp_path / "state", new_app)
    v1 = v1_spec.build_topology()
    words = ["ab1", "ab2", "ab1", "cd1", "cd2", "ef1"]
    producer = Producer(producer_config(broker.bootstrap_servers))
    for word in words:  # all on partition 0: task 0_1 never runs
        producer.produce(topic_name, b"x", word.encode(), partition=0)
    assert producer.flush(15) == 0

    prepare_topics(admin, v1, old_app, 30.0)
    runs = [
        TaskRun(
            "0_0", 0, 0, (OffsetRange(topic_name, 0, 0, len(words)),), 2, 2_000, force_commit=True
        )
    ]
    results = run_share(0, [runs], uuid.uuid4().hex, v1, settings_to_json(v1_settings))
    assert all(r.committed for r in results if hasattr(r, "committed"))
    close_worker_services()

    report = migrate_app(
        v1_spec, v2_spec, old_settings=v1_settings, new_settings=v2_settings, snapshot=False
    )
    by_task = {t.task_id: t for t in report.tasks}
    assert by_task["0_1"].note == "the old task never committed: nothing to migrate"
    assert by_task["0_0"].read_from["counts"] == "changelog"  # no snapshot was taken
    counts = by_task["0_0"].stores["counts"]
    assert (counts.read, counts.written, counts.dropped) == (5, 3, 0)

    old_stores, old_batch, old_offsets = _read_back(
        v1_settings.model_copy(update={"state_dir": tmp_path / "fresh1"}), v1, "0_0"
    )
    new_stores, new_batch, new_offsets = _read_back(
        v2_settings.model_copy(update={"state_dir": tmp_path / "fresh2"}),
        v2_spec.build_topology(),
        "0_0",
    )
    assert new_stores["counts"] == {"ab": 3, "cd": 2, "ef": 1}
    assert old_stores["per-minute"] and new_stores["per-minute"] == {
        key: n * 10 for key, n in old_stores["per-minute"].items()
    }
    assert (new_batch, new_offsets) == (old_batch, old_offsets) == (2, {f"{topic_name}:0": 6})


RESERIALISE = """
def same(key, value):
    return key, value
"""


def test_the_new_app_resumes_from_the_markers_offsets_without_its_own_spark_checkpoint(
    broker, admin, topic_name, tmp_path, monkeypatch
) -> None:
    """A migration that died before its commit is run again. Then what starting the new
    version finds (item 4 builds on it): its first batch, planned
    from the log start as a new Spark checkpoint with startingOffsets=earliest would plan
    it, skips every record below the migrated markers' source offsets, so nothing is
    counted twice. Its batch ids start again from 0, below the migrated batch id."""
    ensure_topic(admin, topic_name, 1)
    old_app, new_app = (f"mig-r{v}-{uuid.uuid4().hex[:6]}" for v in ("1", "2"))
    v1_path, _ = _write_specs(tmp_path / "app", topic_name, old_app, new_app)
    (tmp_path / "app" / "same.py").write_text(RESERIALISE)
    v2_path = tmp_path / "app" / "v2-json.yaml"
    v2_path.write_text(
        f"application_id: {new_app}\ntopology: topology.py:build\n"
        f"params: {{topic: {topic_name}, value_serde: json}}\n"
        "migrations:\n  counts: {record: same.py:same}\n"
    )
    v1_spec, v2_spec = load_app_spec(v1_path), load_app_spec(v2_path)
    v1_settings = _settings(broker, tmp_path / "state", old_app)
    v2_settings = _settings(broker, tmp_path / "state", new_app)
    producer = Producer(producer_config(broker.bootstrap_servers))
    first, more = ["a", "b", "a"], ["a", "c"]
    for word in first:
        producer.produce(topic_name, b"x", word.encode(), partition=0)
    assert producer.flush(15) == 0
    v1 = v1_spec.build_topology()
    prepare_topics(admin, v1, old_app, 30.0)
    _run_v1(v1_settings, v1, topic_name, 7, [(0, len(first))])
    close_worker_services()
    # A first attempt dies after writing v2's records, before its commit markers ...
    real_commit = TaskStateManager.commit

    def dies(self: Any, batch_id: int, offsets: dict[str, int]) -> None:
        self.writer.flush(10)
        raise RuntimeError("killed before the markers")

    monkeypatch.setattr(TaskStateManager, "commit", dies)
    with pytest.raises(RuntimeError, match="killed before the markers"):
        migrate_app(v1_spec, v2_spec, old_settings=v1_settings, new_settings=v2_settings)
    monkeypatch.setattr(TaskStateManager, "commit", real_commit)
    # ... and the next one reverts that tail and migrates (no committed state was there).
    report = migrate_app(v1_spec, v2_spec, old_settings=v1_settings, new_settings=v2_settings)
    assert report.tasks[0].batch_id == 7

    for word in more:
        producer.produce(topic_name, b"x", word.encode(), partition=0)
    assert producer.flush(15) == 0
    v2 = v2_spec.build_topology()
    end = len(first) + len(more)
    run = TaskRun("0_0", 0, 0, (OffsetRange(topic_name, 0, 0, end),), 0, 0, force_commit=True)
    results = run_share(0, [[run]], uuid.uuid4().hex, v2, settings_to_json(v2_settings))
    result = next(r for r in results if hasattr(r, "committed"))
    assert result.committed and result.records_skipped == len(first)
    close_worker_services()
    stores, batch, offsets = _read_back(
        v2_settings.model_copy(update={"state_dir": tmp_path / "fresh"}), v2, "0_0"
    )
    assert stores["counts"] == {"a": 3, "b": 1, "c": 1}
    assert (batch, offsets) == (0, {f"{topic_name}:0": end})  # batch 0 < the migrated 7
    # The new version has run since: migrating onto its state is refused, naming it.
    with pytest.raises(
        MigrationError, match=f"task 0_0 of {new_app} has committed state already \\(batch 0\\)"
    ):
        migrate_app(v1_spec, v2_spec, old_settings=v1_settings, new_settings=v2_settings)


def test_backfill_store_fills_a_new_store_from_history_once(
    broker, admin, topic_name, tmp_path, capsys
) -> None:
    """v2 adds the store ``lengths``: the migration leaves it empty; ``backfill --store
    lengths`` re-runs the subtopology over each task's input up to its commit and writes
    only that store: total line length per key over the whole input, the other stores as
    migrated, the commit where it was. A second run leaves it; a store with entries of its
    own is refused."""
    ensure_topic(admin, topic_name, PARTITIONS)
    old_app, new_app = (f"fill-{v}-{uuid.uuid4().hex[:6]}" for v in ("v1", "v2"))
    v1_path, v2_path = _write_specs(tmp_path / "app", topic_name, old_app, new_app)
    v1_spec, v2_spec = load_app_spec(v1_path), load_app_spec(v2_path)
    v1_settings = _settings(broker, tmp_path / "state", old_app)
    v2_settings = _settings(broker, tmp_path / "state", new_app)
    producer = Producer(producer_config(broker.bootstrap_servers))
    lengths: list[Counter[str]] = [Counter() for _ in range(PARTITIONS)]
    counts: list[Counter[str]] = [Counter() for _ in range(PARTITIONS)]
    for i in range(90):
        word, partition, line = f"w{i % 9}", i % PARTITIONS, "x" * (i % 7 + 1)
        producer.produce(topic_name, line.encode(), word.encode(), partition=partition)
        lengths[partition][word] += len(line)
        counts[partition][word] += 1
    assert producer.flush(15) == 0
    ends = [sum(c.values()) for c in counts]
    v1 = v1_spec.build_topology()
    prepare_topics(admin, v1, old_app, 30.0)
    _run_v1(v1_settings, v1, topic_name, 3, [(0, end) for end in ends])
    close_worker_services()
    migrate_app(v1_spec, v2_spec, old_settings=v1_settings, new_settings=v2_settings)
    common = ["--bootstrap", broker.bootstrap_servers, "--set", f"state_dir={tmp_path / 'state'}"]
    common += ["--set", f"checkpoint_dir={tmp_path / 'ckpt'}"]

    argv = ["backfill", "--app", str(v2_path), "--store", "lengths", "--json", *common]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["records"] == sum(ends) and report["entries"] == 2 * 9  # 9 words a task
    assert all(t["snapshots"] and t["batch_id"] == 3 for t in report["tasks"])
    v2 = v2_spec.build_topology()
    for p in range(PARTITIONS):
        stores, batch, offsets = _read_back(
            v2_settings.model_copy(update={"state_dir": tmp_path / "fresh"}), v2, f"0_{p}"
        )
        assert stores["lengths"] == dict(lengths[p])
        assert stores["counts"] == {w: {"count": n, "from": "v1"} for w, n in counts[p].items()}
        assert (batch, offsets) == (3, {f"{topic_name}:{p}": ends[p]})

    # Again: filled already, nothing written.
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["entries"] == 0
    assert {t["note"] for t in again["tasks"]} == {"filled already (batch 3): left as it is"}
    # A store the app wrote itself is not a fill's to replace.
    code = main(["backfill", "--app", str(v2_path), "--store", "counts", *common])
    err = capsys.readouterr().err
    assert code == 2 and "store counts of task 0_0 holds entries this fill did not write" in err
    code = main(["backfill", "--app", str(v2_path), "--store", "nope", *common])
    assert code == 2 and "the topology has no store 'nope'" in capsys.readouterr().err
    code = main([*argv, "--from", "earliest"])
    assert code == 2 and "--from and --until do not apply" in capsys.readouterr().err
