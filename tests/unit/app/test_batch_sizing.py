"""Adaptive micro-batches: the next batch's record limit from how the last one went."""

from __future__ import annotations

import pytest

from statekeeper.app.batch_sizing import RECORD_OVERHEAD_BYTES, BatchSizing
from statekeeper.settings import StatekeeperSettings


def _sizing(**overrides: object) -> BatchSizing:
    args: dict = {
        "ceiling": 2_000_000,
        "floor": 50_000,
        "target_s": 2.0,
        "memory_bytes": 512 * 1024 * 1024,
    }
    args.update(overrides)
    return BatchSizing(**args)


def test_starts_at_the_floor_and_grows_under_backlog_at_most_4x_a_step() -> None:
    sizing = _sizing()
    assert sizing.limit == 50_000
    # Full batches at 500k records/s: 2 s worth is 1M, reached in steps of at most 4x.
    assert sizing.after_batch(50_000, 0.1) == 200_000
    assert sizing.after_batch(200_000, 0.4) == 800_000
    assert sizing.after_batch(800_000, 1.6) == 1_000_000
    assert sizing.after_batch(1_000_000, 2.0) == 1_000_000


def test_a_slow_full_batch_halves_at_most() -> None:
    sizing = _sizing(limit=1_000_000)
    assert sizing.after_batch(1_000_000, 60.0) == 500_000


def test_caught_up_decays_by_half_but_keeps_twice_the_input() -> None:
    sizing = _sizing(limit=1_000_000)
    assert sizing.after_batch(10_000, 0.2) == 500_000
    assert sizing.after_batch(200_000, 0.5) == 400_000  # headroom over a steady 200k
    assert sizing.after_batch(300_000, 0.5) == 400_000  # not full: it does not grow
    assert sizing.after_batch(10_000, 0.2) == 200_000
    for _ in range(10):
        sizing.after_batch(0, 0.01)
    assert sizing.limit == 50_000  # never below the floor


def test_the_ceiling_and_the_memory_bound_cap_growth() -> None:
    sizing = _sizing(ceiling=300_000, limit=200_000)
    assert sizing.after_batch(200_000, 0.1) == 300_000
    # 1,000-byte records: 64 MiB holds 64 MiB / 1,200 B records.
    sizing = _sizing(memory_bytes=64 * 1024 * 1024, limit=50_000)
    limit = sizing.after_batch(50_000, 0.01, record_bytes=1_000.0)
    assert limit == 64 * 1024 * 1024 // (1_000 + RECORD_OVERHEAD_BYTES) == sizing.memory_cap
    assert sizing.report()["memory_cap"] == limit


def test_the_memory_bound_never_goes_below_the_floor() -> None:
    sizing = _sizing(memory_bytes=1024, limit=50_000)
    assert sizing.after_batch(50_000, 0.01, record_bytes=10_000.0) == 50_000


def test_a_ceiling_below_the_floor_fixes_the_size() -> None:
    sizing = _sizing(ceiling=400)
    assert (sizing.floor, sizing.limit) == (400, 400)
    assert sizing.after_batch(400, 0.001) == 400
    assert sizing.after_batch(3, 0.001) == 400


def test_off_every_batch_may_admit_the_ceiling() -> None:
    sizing = _sizing(adaptive=False)
    assert sizing.limit == 2_000_000
    assert sizing.after_batch(10, 0.01) == 2_000_000


@pytest.mark.parametrize("adaptive", [True, False])
def test_from_settings(adaptive: bool) -> None:
    settings = StatekeeperSettings(
        bootstrap_servers="127.0.0.1:1",
        application_id="sizing",
        max_records_per_batch=900_000,
        min_records_per_batch=30_000,
        batch_target_ms=1_500,
        batch_memory_mb=128,
        adaptive_batches=adaptive,
    )
    sizing = BatchSizing.from_settings(settings)
    assert (sizing.ceiling, sizing.floor, sizing.target_s) == (900_000, 30_000, 1.5)
    assert sizing.memory_bytes == 128 * 1024 * 1024
    assert sizing.limit == (30_000 if adaptive else 900_000)
