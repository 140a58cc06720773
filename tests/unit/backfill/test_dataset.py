"""A dataset's rows as source records, their order per task, the stages and where the stream
takes over (pure logic: no broker, no Spark)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from statekeeper.backfill.dataset import DatasetError, DatasetShape, Routing, shape_of
from statekeeper.backfill.dataset_fill import ordered, stage_order
from statekeeper.backfill.dataset_run import takeover_offsets
from statekeeper.kafka.model import KafkaRecord
from statekeeper.kafka.partitioning import partition_for_key
from statekeeper.processing.dsl import StreamsBuilder


def _shape(**has: bool) -> DatasetShape:
    flags = {f"has_{k}": has.get(k, False) for k in ("topic", "partition", "offset", "timestamp")}
    return DatasetShape("d", "parquet", **flags)


def test_a_row_becomes_a_record_of_its_partition() -> None:
    one = Routing({"lines": 4})
    record = one.record({"key": "k", "value": "v", "timestamp": 7}, 12)
    assert record == KafkaRecord("lines", partition_for_key(b"k", 4), 12, 7, b"k", b"v")
    assert one.record({"key": None, "value": b"x", "offset": 3}, 0).partition == 0
    assert one.record({"key": None, "value": None, "offset": 3}, 0).offset == 3
    utc = datetime(2026, 1, 1, tzinfo=UTC)
    naive = datetime(2026, 1, 1)
    assert one.record({"key": None, "value": None, "timestamp": naive}, 0).timestamp_ms == int(
        utc.timestamp() * 1000
    )
    with pytest.raises(DatasetError, match=r"row 5: partition 4 of lines \(the topic has 4\)"):
        one.record({"key": None, "value": None, "partition": 4}, 5)
    with pytest.raises(DatasetError, match="row 2: value is dict .* not bytes or a string"):
        one.record({"key": None, "value": {"a": 1}}, 2)
    two = Routing({"a": 1, "b": 1})
    with pytest.raises(DatasetError, match=r"row 0: no topic, and the app reads \['a', 'b'\]"):
        two.record({"key": None, "value": None}, 0)
    with pytest.raises(DatasetError, match="topic 'c' is not a source of the app"):
        two.record({"topic": "c", "key": None, "value": None}, 0)


def test_the_schema_is_checked_and_described() -> None:
    shape = shape_of(
        Path("d"),
        "json",
        ["key", "value", "offset", "extra"],
        {"key": "null", "value": "string", "offset": "int"},
    )
    assert shape.has_offset and not shape.has_timestamp and shape.ignored == ("extra",)
    with pytest.raises(DatasetError, match="no 'value' column"):
        shape_of(Path("d"), "json", ["key"], {"key": "binary"})
    with pytest.raises(DatasetError, match="column 'offset' is string, expected int"):
        shape_of(
            Path("d"),
            "json",
            ["key", "value", "offset"],
            {"offset": "string", "key": "binary", "value": "binary"},
        )


def test_a_tasks_records_by_offset_once_or_in_dataset_order() -> None:
    def rec(topic: str, offset: int, value: bytes) -> KafkaRecord:
        return KafkaRecord(topic, 0, offset, 0, None, value)

    items = [
        ((0, 3), rec("s", 5, b"c")),
        ((0, 1), rec("s", 2, b"a")),
        ((0, 2), rec("s", 5, b"dup")),
    ]
    items += [((1, 0), rec("r", 0, b"x")), ((0, 0), rec("r", 0, b"y"))]
    by_tp, duplicates = ordered(items, frozenset({"s"}))
    assert [(r.offset, r.value) for r in by_tp["s:0"]] == [(2, b"a"), (5, b"dup")]
    assert duplicates == 1  # offset 5 twice: the first in dataset order kept
    assert [(r.offset, r.value) for r in by_tp["r:0"]] == [(0, b"y"), (1, b"x")]


def test_stages_follow_the_repartition_topics() -> None:
    builder = StreamsBuilder()
    builder.stream("lines").group_by(lambda k, v: v).count()
    topology = builder.build()
    assert stage_order(topology, "app") == [0, 1]


def test_where_the_stream_takes_over() -> None:
    starts, ends = {"t:0": 0, "t:1": 40}, {"t:0": 100, "t:1": 100}
    stats = {"t:0": (10, 9), "t:1": (50, 59)}
    assert takeover_offsets(_shape(offset=True), stats, starts, ends) == {"t:0": 10, "t:1": 60}
    assert takeover_offsets(_shape(), {"t:0": (3, None)}, starts, ends) == starts
    with pytest.raises(
        DatasetError, match=r"t:1 ends at offset 30 .* records 30..39 are in neither"
    ):
        takeover_offsets(_shape(offset=True), {"t:0": (1, 0), "t:1": (1, 29)}, starts, ends)
    with pytest.raises(DatasetError, match="t:1 ends at offset 0 in the dataset"):
        takeover_offsets(_shape(offset=True), {"t:0": (1, 0)}, starts, ends)
    with pytest.raises(
        DatasetError, match="has offset 100 in the dataset but the topic ends at 100"
    ):
        takeover_offsets(_shape(offset=True), {"t:0": (1, 100), "t:1": (1, 50)}, starts, ends)
