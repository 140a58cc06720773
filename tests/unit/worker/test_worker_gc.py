"""The garbage-collector settings a Spark worker runs statekeeper tasks under."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from statekeeper.worker.gc_freeze import frozen_after_share, in_spark_task, raised_gc_threshold


@pytest.fixture(autouse=True)
def _unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # the rest of the test session collects as usual


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_tasks_run_with_a_raised_gc_threshold_that_is_put_back():
    before = gc.get_threshold()
    with raised_gc_threshold(12_345):
        assert gc.get_threshold() == (12_345, *before[1:])
    assert gc.get_threshold() == before
    with raised_gc_threshold(0):
        assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), raised_gc_threshold(12_345):
        raise RuntimeError("a failed task")
    assert gc.get_threshold() == before


def test_a_share_leaves_what_is_alive_frozen_and_the_next_share_unfreezes_it():
    kept = _Cycle()
    with frozen_after_share(1_000, in_spark_worker=True):
        assert gc.get_freeze_count() == 0
    assert gc.get_freeze_count() > 0
    assert gc.is_tracked(kept)
    assert not any(o is kept for o in gc.get_objects())  # hidden from full collections
    with frozen_after_share(1_000, in_spark_worker=True):
        assert gc.get_freeze_count() == 0
        assert any(o is kept for o in gc.get_objects())


def test_cyclic_garbage_is_collected_within_full_every_shares():
    full_every = 3

    def share() -> bool:
        """One share, then Spark's full collection; whether it left objects frozen."""
        with frozen_after_share(full_every, in_spark_worker=True):
            pass
        frozen = gc.get_freeze_count() > 0
        gc.collect()
        return frozen

    for _ in range(full_every):  # line up with the share counter: stop after an unfrozen one
        if not share():
            break
    garbage = _Cycle()
    dead = weakref.ref(garbage)
    del garbage
    survived = 0
    while dead() is not None and survived <= full_every:
        share()
        survived += 1
    # The freezing shares hide it from Spark's collection; the unfrozen one finds it.
    assert dead() is None
    assert survived == full_every


def test_outside_spark_or_at_zero_nothing_is_frozen():
    with frozen_after_share(50, in_spark_worker=False):
        pass
    assert gc.get_freeze_count() == 0
    with frozen_after_share(0, in_spark_worker=True):
        pass
    assert gc.get_freeze_count() == 0
    assert not in_spark_task()  # pytest is not a Spark task


def test_a_failed_share_still_freezes():
    with pytest.raises(RuntimeError), frozen_after_share(1_000, in_spark_worker=True):
        raise RuntimeError("a failed task")
    assert gc.get_freeze_count() > 0
