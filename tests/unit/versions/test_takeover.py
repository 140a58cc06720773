"""The takeover: planned from what the old version committed (pure), adopted at the new
version's first start, and applied by the batch planner (floors, shifted batch ids, the
recorded first batch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_apps.word_count.topology import build_topology as word_count
from statekeeper.app.batch_planner import BatchPlanner
from statekeeper.app.takeover_start import (
    ADOPTED_FILE,
    ShiftedBatchLog,
    adopt_takeover,
    read_first_batch,
    record_first_batch,
)
from statekeeper.kafka.model import OffsetRange
from statekeeper.migration.takeover_plan import OldCommit, TakeoverFacts, plan_takeover
from statekeeper.processing.dsl import Grouped, Materialized, StreamsBuilder
from statekeeper.processing.stream_task import _of_committed_batches
from statekeeper.versions.takeover import (
    CarriedTopic,
    Takeover,
    TakeoverError,
    read_takeover,
    takeover_path,
    write_takeover,
)
from tests.unit.app.batch_log_fake import MemoryBatchLog

OLD, NEW = "wc", "wc2"
P = 2  # partitions of every topic
PARTITIONS = {
    "lines": P,
    f"{OLD}-words-repartition": P,
    f"{NEW}-words-repartition": P,
}


def facts(last_batch: int | None = 7, **kwargs) -> TakeoverFacts:
    rep = f"{OLD}-words-repartition"
    return TakeoverFacts(
        last_batch=last_batch,
        batch_end=kwargs.get("batch_end", {("lines", 0): 100, ("lines", 1): 80}),
        repartition_start=kwargs.get("start", {(rep, 0): 0, (rep, 1): 0}),
        repartition_end=kwargs.get("end", {(rep, 0): 500, (rep, 1): 300}),
    )


def plan(commits, old=None, new=None, f=None) -> Takeover:
    return plan_takeover(
        old_topology=old or word_count("lines"),
        new_topology=new or word_count("lines"),
        old_app=OLD,
        new_app=NEW,
        partitions=PARTITIONS,
        commits=commits,
        facts=f or facts(),
    )


def count_task(p: int, batch: int, repartition_offset: int) -> OldCommit:
    return OldCommit(f"1_{p}", batch, {f"{OLD}-words-repartition:{p}": repartition_offset})


def test_word_count_takes_over_at_the_last_batch_end_and_carries_the_repartition_tail() -> None:
    takeover = plan([count_task(0, 6, 420), count_task(1, 7, 300)])
    assert takeover.batch_base == 8  # above the old Spark batches and task commits
    # The stateless splitter (subtopology 0) starts where the last micro-batch ended.
    assert takeover.floors == {0: {"lines": {0: 100, 1: 80}}}
    assert takeover.start_offsets == {"lines": {0: 100, 1: 80}}
    # Partition 0's count task had 80 repartition records left; partition 1's none.
    assert takeover.carried == (
        CarriedTopic(f"{OLD}-words-repartition", f"{NEW}-words-repartition", 7, {0: (420, 500)}),
    )
    assert takeover.alias(f"{OLD}-words-repartition") == f"{NEW}-words-repartition"
    assert takeover.carried_ranges() == [OffsetRange(f"{OLD}-words-repartition", 0, 420, 500)]


def test_a_count_task_that_never_committed_gets_the_whole_retained_tail() -> None:
    takeover = plan(
        [count_task(0, 6, 500), OldCommit("1_1", None, {})],
        f=facts(start={(f"{OLD}-words-repartition", 0): 0, (f"{OLD}-words-repartition", 1): 40}),
    )
    assert takeover.carried[0].ranges == {1: (40, 300)}


def test_an_old_version_that_committed_no_batch_starts_from_the_logs_start() -> None:
    takeover = plan([], f=facts(last_batch=None, batch_end={}, end={}))
    assert takeover.start_offsets == {"lines": {0: -2, 1: -2}}
    assert takeover.floors == {}
    assert takeover.batch_base == 0
    assert '"lines":{"0":-2,"1":-2}' in takeover.starting_offsets_json()


def _stateful_upstream(app_store: str = "per-key"):
    """in -> count per key (stateful) -> re-grouped by count through a repartition topic."""
    builder = StreamsBuilder()
    table = (
        builder.stream("lines", key_serde="str", value_serde="str")
        .group_by_key()
        .count(Materialized.as_(app_store).with_serdes("str", "int"))
    )
    table.to_stream().group_by(
        lambda _k, v: str(v), Grouped.as_("words").with_key_serde("str").with_value_serde("int")
    ).count(Materialized.as_("by-count").with_serdes("str", "int"))
    return builder.build()


def test_a_stateful_task_feeding_a_repartition_topic_must_have_committed_the_last_batch() -> None:
    topology = _stateful_upstream()
    behind = [
        OldCommit("0_0", 7, {"lines:0": 100}),
        OldCommit("0_1", 5, {"lines:1": 60}),  # the last batch ended at 80
    ]
    with pytest.raises(TakeoverError, match=r"task 0_1 committed lines\[1\] up to 60 .* 80"):
        plan(behind, old=topology, new=topology)
    settled = [OldCommit("0_0", 7, {"lines:0": 100}), OldCommit("0_1", 7, {"lines:1": 80})]
    takeover = plan(settled, old=topology, new=topology)
    assert takeover.floors == {0: {"lines": {0: 100, 1: 80}}}


def test_unconsumed_old_repartition_records_need_a_counterpart() -> None:
    renamed = StreamsBuilder()
    renamed.stream("lines", key_serde="bytes", value_serde="str").flat_map_values(
        lambda line: line.split()
    ).group_by(lambda _k, w: w, Grouped.as_("tokens")).count(Materialized.as_("word-counts"))
    with pytest.raises(TakeoverError, match="reads no wc2-words-repartition"):
        plan([count_task(0, 7, 420), count_task(1, 7, 300)], new=renamed.build())


def test_a_stateful_task_behind_the_last_batch_is_floored_at_its_commit_with_a_note() -> None:
    builder = StreamsBuilder()
    builder.stream("lines", key_serde="str", value_serde="str").group_by_key().count(
        Materialized.as_("per-key").with_serdes("str", "int")
    )
    topology = builder.build()
    takeover = plan(
        [OldCommit("0_0", 7, {"lines:0": 100}), OldCommit("0_1", 6, {"lines:1": 70})],
        old=topology,
        new=topology,
    )
    assert takeover.start_offsets == {"lines": {0: 100, 1: 70}}
    assert any("task 0_1 committed lines[1] up to 70" in n for n in takeover.notes)


def test_records_of_uncommitted_old_batches_are_dropped() -> None:
    from statekeeper.kafka.model import KafkaRecord

    def rec(offset: int, batch: int | None) -> KafkaRecord:
        headers = (
            []
            if batch is None
            else [
                ("sk.app", b"wc"),
                ("sk.task", b"0_0"),
                ("sk.batch", str(batch).encode()),
                ("sk.seq", b"0"),
            ]
        )
        return KafkaRecord("t", 0, offset, 0, None, b"v", headers)

    kept = _of_committed_batches([rec(1, 6), rec(2, 7), rec(3, 8), rec(4, None)], 7)
    assert [r.offset for r in kept] == [1, 2, 4]


# -- the record and its adoption -------------------------------------------------------------


def test_the_record_round_trips_and_a_broken_one_is_named(tmp_path: Path) -> None:
    takeover = plan([count_task(0, 6, 420), count_task(1, 7, 300)])
    path = write_takeover(takeover_path(tmp_path), takeover)
    assert read_takeover(path) == takeover
    assert read_takeover(tmp_path / "none.json") is None
    path.write_text(json.dumps({"format": 1}))
    with pytest.raises(TakeoverError, match="is not a takeover record"):
        read_takeover(path)


def test_a_first_start_adopts_the_record_and_later_starts_keep_it(tmp_path: Path) -> None:
    root, checkpoint = tmp_path / "state" / NEW, tmp_path / "checkpoints" / NEW
    assert adopt_takeover(checkpoint, root) is None
    first = plan([count_task(0, 6, 420), count_task(1, 7, 300)])
    write_takeover(takeover_path(root), first)
    assert adopt_takeover(checkpoint, root) == first
    assert (checkpoint / ADOPTED_FILE).exists()
    # A later record in the state root does not renumber a running version.
    write_takeover(takeover_path(root), Takeover(OLD, 99, {}, {}))
    assert adopt_takeover(checkpoint, root) == first


def test_a_pending_migration_stops_the_start(tmp_path: Path) -> None:
    root = tmp_path / "state"
    write_takeover(
        takeover_path(root), Takeover(OLD, 0, {}, {}, extra={"pending": "a migration from wc"})
    )
    with pytest.raises(TakeoverError, match="a migration from wc and has not finished"):
        adopt_takeover(tmp_path / "checkpoint", root)


def test_a_query_that_ran_without_the_record_ignores_a_later_one(tmp_path: Path) -> None:
    root, checkpoint = tmp_path / "state", tmp_path / "checkpoint"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1")
    write_takeover(takeover_path(root), plan([count_task(0, 6, 420), count_task(1, 7, 300)]))
    assert adopt_takeover(checkpoint, root) is None


def test_the_first_batch_is_recorded_once_and_replayed_with_shifted_ids(tmp_path: Path) -> None:
    first = [
        OffsetRange("lines", 0, 100, 150),
        OffsetRange(f"{OLD}-words-repartition", 0, 420, 500),
    ]
    assert record_first_batch(tmp_path, first) == first
    # Spark runs batch 0 again after a crash: the recorded ranges are read, not new ones.
    assert record_first_batch(tmp_path, first[:1]) == first
    assert read_first_batch(tmp_path) == first

    spark = MemoryBatchLog()
    spark.log(1, [OffsetRange("lines", 0, 150, 170)])
    spark.commit(1)
    log = ShiftedBatchLog(spark, tmp_path, base=8)
    assert log.ranges(8) == first
    assert log.ranges(9) == [OffsetRange("lines", 0, 150, 170)]
    assert log.ranges(7) is None
    assert log.last_committed_batch() == 9


def test_the_planner_cuts_ranges_below_a_floor_and_replays_the_first_batch(tmp_path: Path) -> None:
    takeover = plan([count_task(0, 6, 420), count_task(1, 7, 300)])
    subtopology = {"lines": 0, f"{NEW}-words-repartition": 1, f"{OLD}-words-repartition": 1}
    first = [
        OffsetRange("lines", 0, 90, 130),  # floored at 100
        OffsetRange("lines", 1, 0, 80),  # all below the floor (80): dropped
        OffsetRange(f"{OLD}-words-repartition", 0, 420, 500),
    ]
    record_first_batch(tmp_path, first)
    spark = MemoryBatchLog()
    spark.commit(0)
    planner = BatchPlanner(
        ShiftedBatchLog(spark, tmp_path, takeover.batch_base),
        subtopology_of=subtopology.__getitem__,
        max_uncommitted_batches=3,
        max_records_per_batch=10,
        floor=takeover.floor,
        first_replayable=takeover.batch_base,
    )
    # A restart after Spark committed the first batch, before any task did: it is replayed.
    assert planner.seed_from_commit_log()
    runs = {r.task_id: r for r in planner.runs_to_commit_held()}
    assert sorted(runs) == ["0_0", "1_0"]
    assert runs["0_0"].backlog[0].ranges == (OffsetRange("lines", 0, 100, 130),)
    assert runs["0_0"].backlog[0].batch_id == takeover.batch_base
    assert runs["1_0"].backlog[0].ranges == (OffsetRange(f"{OLD}-words-repartition", 0, 420, 500),)


def test_without_the_old_checkpoint_only_fully_migrated_apps_take_over() -> None:
    builder = StreamsBuilder()
    builder.stream("lines", key_serde="str", value_serde="str").group_by_key().count(
        Materialized.as_("per-key").with_serdes("str", "int")
    )
    stateful_only = builder.build()
    missing = TakeoverFacts(None, {}, {}, {}, checkpoint=None)
    commits = [OldCommit("0_0", 4, {"lines:0": 10}), OldCommit("0_1", 6, {"lines:1": 7})]
    takeover = plan(commits, old=stateful_only, new=stateful_only, f=missing)
    assert (takeover.batch_base, takeover.start_offsets) == (7, {"lines": {0: 10, 1: 7}})
    # word_count's splitter has no state: where it stops only the checkpoint says.
    with pytest.raises(TakeoverError, match="task 0_0 has no migrated state"):
        plan([count_task(0, 6, 420), count_task(1, 7, 300)], f=missing)
