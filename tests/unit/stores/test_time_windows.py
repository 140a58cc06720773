"""TimeWindows: tumbling and hopping window starts, and validation."""

from __future__ import annotations

import dataclasses
import random

import pytest

from statekeeper.errors import InvalidStoreConfigError
from statekeeper.stores.time_windows import TimeWindows, validate_retention


def test_tumbling_sets_advance_to_size():
    windows = TimeWindows.tumbling(10, grace_ms=3)
    assert (windows.size_ms, windows.advance_ms, windows.grace_ms) == (10, 10, 3)


@pytest.mark.parametrize(
    ("timestamp", "starts"), [(0, [0]), (1, [0]), (9, [0]), (10, [10]), (25, [20]), (99, [90])]
)
def test_tumbling_window_starts(timestamp, starts):
    assert TimeWindows.tumbling(10).window_starts(timestamp) == starts


@pytest.mark.parametrize(
    ("timestamp", "starts"),
    [(0, [0]), (3, [0]), (5, [0, 5]), (9, [0, 5]), (10, [5, 10]), (12, [5, 10]), (14, [5, 10])],
)
def test_hopping_window_starts(timestamp, starts):
    assert TimeWindows.hopping(10, 5).window_starts(timestamp) == starts


def test_hopping_with_uneven_advance():
    assert TimeWindows.hopping(10, 3).window_starts(10) == [3, 6, 9]
    assert TimeWindows.hopping(10, 3).window_starts(2) == [0]


@pytest.mark.parametrize("seed", range(5))
def test_window_starts_match_brute_force(seed):
    rng = random.Random(seed)
    for _ in range(200):
        size = rng.randint(1, 50)
        advance = rng.randint(1, size)
        ts = rng.randint(0, 500)
        windows = TimeWindows.hopping(size, advance)
        expected = [s for s in range(0, ts + 1, advance) if s <= ts < s + size]
        assert windows.window_starts(ts) == expected, (size, advance, ts)


@pytest.mark.parametrize("size", [0, -1])
def test_size_must_be_positive(size):
    with pytest.raises(InvalidStoreConfigError, match="window size must be > 0"):
        TimeWindows.tumbling(size)


@pytest.mark.parametrize("advance", [0, -5, 11])
def test_advance_must_be_within_size(advance):
    with pytest.raises(InvalidStoreConfigError, match=r"window advance must be in \(0, size=10\]"):
        TimeWindows.hopping(10, advance)


def test_grace_must_not_be_negative():
    with pytest.raises(InvalidStoreConfigError, match="grace must be >= 0"):
        TimeWindows.tumbling(10, grace_ms=-1)


def test_time_windows_are_immutable_and_comparable():
    windows = TimeWindows.hopping(10, 5, grace_ms=2)
    assert windows == TimeWindows(size_ms=10, advance_ms=5, grace_ms=2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        windows.size_ms = 20  # type: ignore[misc]


def test_validate_retention():
    validate_retention("w", 15, 10, 5)  # equal is fine
    with pytest.raises(InvalidStoreConfigError, match="retention 14 ms"):
        validate_retention("w", 14, 10, 5)
