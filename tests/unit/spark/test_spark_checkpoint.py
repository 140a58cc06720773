"""Reading batch facts from Spark's offset and commit logs (files written as Spark does)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statekeeper.errors import StatekeeperError
from statekeeper.kafka.model import OffsetRange
from statekeeper.spark.checkpoint_log import (
    batch_timestamp_ms,
    first_batch_ranges,
    last_committed_offsets,
    logged_batch_ranges,
)


def log_batch(checkpoint: Path, batch_id: int, *sources: object, ts: int = 1000) -> None:
    offsets = checkpoint / "offsets"
    offsets.mkdir(parents=True, exist_ok=True)
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": ts, "conf": {}}
    lines = ["v1", json.dumps(meta)]
    lines += [s if isinstance(s, str) else json.dumps(s) for s in sources]
    (offsets / str(batch_id)).write_text("\n".join(lines))


def commit_batch(checkpoint: Path, batch_id: int) -> None:
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    (checkpoint / "commits" / str(batch_id)).write_text('v1\n{"nextBatchWatermarkMs":0}')


def test_ranges_run_from_the_previous_batch_end_to_this_batch_end(tmp_path: Path) -> None:
    log_batch(tmp_path, 4, {"a": {"0": 10, "1": 5}, "b": {"0": 7}})
    log_batch(tmp_path, 5, {"a": {"0": 25, "1": 5}, "b": {"0": 9}})
    assert logged_batch_ranges(tmp_path, 5) == [
        OffsetRange("a", 0, 10, 25),
        OffsetRange("b", 0, 7, 9),  # a[1] has nothing new: no range
    ]


def test_batch_0_runs_from_an_explicit_start_to_its_logged_end(tmp_path: Path) -> None:
    log_batch(tmp_path, 0, {"a": {"0": 25, "1": 5}})
    start = {("a", 0): 10, ("a", 1): 5}
    assert first_batch_ranges(tmp_path, start) == [OffsetRange("a", 0, 10, 25)]
    # earliest (-2) or latest (-1) for a partition, a partition not named, no batch 0 logged:
    # the start the source chose is not known here.
    assert first_batch_ranges(tmp_path, {("a", 0): 10, ("a", 1): -2}) is None
    assert first_batch_ranges(tmp_path, {("a", 0): 10}) is None
    assert first_batch_ranges(tmp_path / "none", start) is None


@pytest.mark.parametrize(
    ("previous", "current", "batch_id"),
    [
        (None, {"a": {"0": 3}}, 0),  # batch 0 starts at the unlogged initial offset
        (None, {"a": {"0": 3}}, 1),  # the previous entry is gone (purged)
        ({"a": {"0": 1}}, {"a": {"0": 3, "1": 2}}, 1),  # a[1] is new: the source chose its start
        ("not json", {"a": {"0": 3}}, 1),
        ("-", {"a": {"0": 3}}, 1),
    ],
)
def test_none_when_the_log_cannot_say(
    tmp_path: Path, previous: object, current: object, batch_id: int
) -> None:
    if previous is not None:
        log_batch(tmp_path, batch_id - 1, previous)
    log_batch(tmp_path, batch_id, current)
    assert logged_batch_ranges(tmp_path, batch_id) is None


def test_none_with_two_sources(tmp_path: Path) -> None:
    log_batch(tmp_path, 0, {"a": {"0": 1}}, {"b": {"0": 1}})
    log_batch(tmp_path, 1, {"a": {"0": 2}}, {"b": {"0": 2}})
    assert logged_batch_ranges(tmp_path, 1) is None


def test_batch_timestamp_and_last_committed_offsets(tmp_path: Path) -> None:
    assert last_committed_offsets(tmp_path) is None
    log_batch(tmp_path, 0, {"a": {"0": 4}}, ts=111)
    log_batch(tmp_path, 1, {"a": {"0": 9}}, ts=222)
    commit_batch(tmp_path, 0)
    assert batch_timestamp_ms(tmp_path, 1) == 222
    assert last_committed_offsets(tmp_path) == {"a": {"0": 4}}
    with pytest.raises(StatekeeperError, match="offsets/7"):
        batch_timestamp_ms(tmp_path, 7)
