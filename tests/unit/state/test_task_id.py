"""TaskId: the one reader and writer of ``<subtopology>_<partition>`` task ids."""

from __future__ import annotations

import pytest

from statekeeper.ops.restore import RestoreError, parse_task_id
from statekeeper.processing.topology import task_id
from statekeeper.state.task_id import TaskId


@pytest.mark.parametrize(
    ("text", "sub", "partition"),
    [("0_0", 0, 0), ("1_0", 1, 0), ("2_17", 2, 17), ("12_345", 12, 345)],
)
def test_parse_and_format_round_trip(text: str, sub: int, partition: int) -> None:
    tid = TaskId.parse(text)
    assert tid == TaskId(sub, partition)
    assert (tid.subtopology, tid.partition) == (sub, partition)
    assert str(tid) == text
    assert TaskId.parse(str(TaskId(sub, partition))) == TaskId(sub, partition)
    # The builder the runtime names tasks with writes the same string.
    assert task_id(sub, partition) == text


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "1",
        "1_",
        "_1",
        "1__0",
        "1_0_2",
        "a_1",
        "1_b",
        "-1_0",
        "1_-1",
        " 1_0",
        "1_0 ",
        "1_0\n",
        "1.0_0",
        "1-0",
        "1_²",
        "١_٠",
    ],
)
def test_bad_text_is_a_value_error_naming_it(bad: str) -> None:
    with pytest.raises(ValueError, match="is not <subtopology>_<partition>") as raised:
        TaskId.parse(bad)
    assert repr(bad) in str(raised.value)
    assert TaskId.try_parse(bad) is None


def test_a_non_string_is_refused_the_same_way() -> None:
    with pytest.raises(ValueError, match="task id None is not"):
        TaskId.parse(None)  # type: ignore[arg-type]
    assert TaskId.try_parse(10) is None  # type: ignore[arg-type]


def test_leading_zeros_read_as_numbers() -> None:
    assert TaskId.parse("01_007") == TaskId(1, 7)
    assert str(TaskId.parse("01_007")) == "1_7"


def test_ordering_is_numeric_subtopology_then_partition() -> None:
    texts = ["2_0", "1_10", "10_0", "1_2", "0_5"]
    assert [str(t) for t in sorted(TaskId.parse(t) for t in texts)] == [
        "0_5",
        "1_2",
        "1_10",
        "2_0",
        "10_0",
    ]
    assert TaskId(1, 2) < TaskId(1, 10) < TaskId(2, 0)


def test_frozen_hashable_and_checked() -> None:
    tid = TaskId(1, 0)
    with pytest.raises(AttributeError):
        tid.partition = 2  # type: ignore[misc]
    assert {tid: "x"}[TaskId.parse("1_0")] == "x"
    for sub, partition in ((-1, 0), (0, -1)):
        with pytest.raises(ValueError, match="must not be negative"):
            TaskId(sub, partition)
    for sub, partition in (("1", 0), (0, 1.0)):
        with pytest.raises(TypeError, match="must be an integer"):
            TaskId(sub, partition)  # type: ignore[arg-type]


def test_restore_keeps_its_own_error() -> None:
    assert parse_task_id("3_4") == (3, 4)
    with pytest.raises(RestoreError, match=r"task id 'x_1' is not <subtopology>_<partition>"):
        parse_task_id("x_1")


def test_numpy_integers_are_plain_ints_inside() -> None:
    np = pytest.importorskip("numpy")
    tid = TaskId(np.int64(1), np.int32(3))
    assert type(tid.subtopology) is int and type(tid.partition) is int
    assert str(tid) == "1_3" == task_id(np.int64(1), np.int64(3))
