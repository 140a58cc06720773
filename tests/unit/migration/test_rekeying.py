"""Re-keying state across another number of tasks (pure parts): which subtopologies a
migration re-keys or refuses, the merged internal task state, how a new task keeps its keys
of the old repartition records, the planner's fan-out and the takeover's carried ranges."""

from __future__ import annotations

import pytest

from spark_apps.word_count_v2.topology import build_topology as word_count_v2
from statekeeper.app.batch_planner import BatchPlanner
from statekeeper.kafka.model import KafkaRecord, OffsetRange
from statekeeper.kafka.partitioning import partition_for_key
from statekeeper.migration import MigrationError
from statekeeper.migration.rekey_plan import Rekey, plan_rekeys, task_counts
from statekeeper.migration.takeover_plan import OldCommit, TakeoverFacts, plan_takeover
from statekeeper.processing.dsl import Grouped, Materialized, StreamsBuilder
from statekeeper.processing.errors import TopologyError
from statekeeper.processing.stream_task import _routed_to
from statekeeper.processing.task_state_store import merged_task_state
from statekeeper.versions.takeover import Takeover
from tests.unit.app.batch_log_fake import MemoryBatchLog

OLD, NEW = "wc", "wc2"
OLD_REP, NEW_REP = f"{OLD}-words-repartition", f"{NEW}-words-repartition"


def direct_count(topic: str = "events"):
    builder = StreamsBuilder()
    builder.stream(topic, key_serde="str", value_serde="str").group_by_key().count(
        Materialized.as_("counts").with_serdes("str", "int")
    )
    return builder.build()


def test_a_subtopology_fed_by_a_repartition_topic_is_rekeyed() -> None:
    v2 = word_count_v2("lines", word_partitions=6)
    new = task_counts(v2, NEW, {"lines": 4, **v2.repartition_partitions(NEW, {"lines": 4})})
    assert new == {0: 4, 1: 6}
    assert plan_rekeys(v2, NEW, {1: 4}, new) == [Rekey(1, 4, 6)]
    assert plan_rekeys(v2, NEW, {1: 6}, new) == []  # same count: copied task by task


def test_the_source_expanded_rekeys_the_counts_not_the_stateless_splitter() -> None:
    v2 = word_count_v2("lines")
    partitions = {"lines": 6, **v2.repartition_partitions(NEW, {"lines": 6})}
    assert plan_rekeys(v2, NEW, {1: 4}, task_counts(v2, NEW, partitions)) == [Rekey(1, 4, 6)]


def test_state_read_from_a_source_directly_is_refused() -> None:
    topology = direct_count()
    with pytest.raises(MigrationError, match=r"subtopology 0 has state and reads source topic"):
        plan_rekeys(topology, NEW, {0: 4}, {0: 6})


def test_a_repartition_topic_needs_a_positive_count() -> None:
    with pytest.raises(TopologyError, match="needs >= 1 partitions"):
        Grouped.as_("words").with_partitions(0)


def test_merged_task_state_keeps_the_newest_time_and_every_partition_position() -> None:
    states = {
        0: [
            ("stream-time", 100),
            ("punctuation|flush", 5_000),
            (f"dedupe|{OLD_REP}|0_1", [7, 3, 1]),
        ],
        1: [
            ("stream-time", 250),
            ("punctuation|flush", 4_000),
            (f"dedupe|{OLD_REP}|0_1", [7, 9, 1]),
            ("dedupe|other-topic|0_0", [2, 0, 0]),
        ],
    }
    merged = dict(merged_task_state(states, frozenset({OLD_REP})))
    assert merged == {
        "stream-time": 250,
        "punctuation|flush": 4_000,
        # One position per old partition: each filters the records of its own partition.
        f"dedupe|{OLD_REP}[0]|0_1": [7, 3, 1],
        f"dedupe|{OLD_REP}[1]|0_1": [7, 9, 1],
        "dedupe|other-topic|0_0": [2, 0, 0],
    }


def test_a_new_task_keeps_the_old_records_whose_key_it_holds() -> None:
    records = [KafkaRecord(OLD_REP, 2, i, f"w{i}".encode(), b"x", 0, []) for i in range(60)] + [
        KafkaRecord(OLD_REP, 2, 60, None, b"x", 0, [])
    ]
    kept = {p: _routed_to(records, p, 6, old_partition=2) for p in range(6)}
    assert sum(len(k) for k in kept.values()) == len(records)  # each record exactly once
    for p, own in kept.items():
        assert all((2 % 6 if r.key is None else partition_for_key(r.key, 6)) == p for r in own)


def test_the_planner_fans_a_rekeyed_old_topic_out_to_every_task() -> None:
    subs = {"lines": 0, OLD_REP: 1, NEW_REP: 1}
    planner = BatchPlanner(
        MemoryBatchLog(),
        subtopology_of=subs.__getitem__,
        max_uncommitted_batches=3,
        max_records_per_batch=100,
        fan_out=lambda topic: 3 if topic == OLD_REP else None,
        first_replayable=0,
    )
    runs = planner.plan_batch(0, [OffsetRange("lines", 0, 0, 5), OffsetRange(OLD_REP, 1, 10, 20)])
    by_task = {run.task_id: run.ranges for run in runs}
    assert by_task == {
        "0_0": (OffsetRange("lines", 0, 0, 5),),
        **{f"1_{p}": (OffsetRange(OLD_REP, 1, 10, 20),) for p in range(3)},
    }


def test_the_takeover_carries_every_old_partition_from_the_new_tasks_markers() -> None:
    old, new = word_count_v2("lines"), word_count_v2("lines", word_partitions=6)
    offsets = {f"{OLD_REP}:0": 40, f"{OLD_REP}:1": 35}  # old task 1_0 and 1_1 committed
    commits = [OldCommit(f"1_{p}", 7, dict(offsets)) for p in range(6)]
    takeover = plan_takeover(
        old_topology=old,
        new_topology=new,
        old_app=OLD,
        new_app=NEW,
        partitions={"lines": 2, OLD_REP: 2, NEW_REP: 6},
        commits=commits,
        facts=TakeoverFacts(
            last_batch=7,
            batch_end={("lines", 0): 100, ("lines", 1): 90},
            repartition_start={(OLD_REP, 0): 0, (OLD_REP, 1): 0},
            repartition_end={(OLD_REP, 0): 50, (OLD_REP, 1): 35},
        ),
    )
    (carried,) = takeover.carried
    assert carried.ranges == {0: (40, 50)} and carried.fan_out == 6
    assert takeover.fan_out(OLD_REP) == 6 and takeover.fan_out("lines") is None
    again = Takeover.from_dict(takeover.to_dict())
    assert again.carried == takeover.carried
