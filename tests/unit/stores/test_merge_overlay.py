"""base.merge_overlay: merging sorted pending writes over a sorted base iterator."""

from __future__ import annotations

import random

import pytest

from statekeeper.stores.base import in_range, merge_overlay

BASE = [(b"a", b"1"), (b"c", b"3"), (b"e", b"5")]


def merged(base, overlay, *, reverse=False):
    return list(merge_overlay(iter(base), overlay, reverse=reverse))


def test_forward_merge_interleaves_in_key_order():
    overlay = [(b"b", b"2"), (b"d", b"4"), (b"f", b"6")]
    assert merged(BASE, overlay) == [
        (b"a", b"1"),
        (b"b", b"2"),
        (b"c", b"3"),
        (b"d", b"4"),
        (b"e", b"5"),
        (b"f", b"6"),
    ]


def test_reverse_merge_interleaves_in_descending_key_order():
    base = list(reversed(BASE))
    overlay = [(b"f", b"6"), (b"d", b"4"), (b"b", b"2")]
    assert merged(base, overlay, reverse=True) == [
        (b"f", b"6"),
        (b"e", b"5"),
        (b"d", b"4"),
        (b"c", b"3"),
        (b"b", b"2"),
        (b"a", b"1"),
    ]


@pytest.mark.parametrize("reverse", [False, True])
def test_overlay_wins_on_equal_keys(reverse):
    base = list(reversed(BASE)) if reverse else BASE
    overlay = [(b"c", b"new")]
    result = dict(merged(base, overlay, reverse=reverse))
    assert result == {b"a": b"1", b"c": b"new", b"e": b"5"}
    assert len(merged(base, overlay, reverse=reverse)) == 3


@pytest.mark.parametrize("reverse", [False, True])
def test_tombstones_hide_base_entries(reverse):
    base = list(reversed(BASE)) if reverse else BASE
    overlay = [(b"a", None), (b"e", None)]
    overlay = sorted(overlay, reverse=reverse)
    assert merged(base, overlay, reverse=reverse) == [(b"c", b"3")]


@pytest.mark.parametrize("reverse", [False, True])
def test_tombstone_for_a_key_missing_from_base_yields_nothing(reverse):
    assert merged([], [(b"x", None)], reverse=reverse) == []
    base = list(reversed(BASE)) if reverse else BASE
    assert merged(base, [(b"zz", None)], reverse=reverse) == base


@pytest.mark.parametrize("reverse", [False, True])
def test_empty_inputs(reverse):
    assert merged([], [], reverse=reverse) == []
    base = list(reversed(BASE)) if reverse else BASE
    assert merged(base, [], reverse=reverse) == base
    assert merged([], base, reverse=reverse) == base


def test_merge_is_lazy():
    def exploding_base():
        yield b"a", b"1"
        raise AssertionError("base consumed past the first entry")

    it = merge_overlay(exploding_base(), [(b"b", b"2")])
    assert next(it) == (b"a", b"1")


def test_in_range_bounds_are_inclusive_and_none_is_unbounded():
    assert in_range(b"b", b"b", b"b")
    assert not in_range(b"a", b"b", None)
    assert not in_range(b"c", None, b"b")
    assert in_range(b"anything", None, None)


def _random_key(rng: random.Random) -> bytes:
    # Short keys over a tiny alphabet (including 0x00 and 0xff) so overlaps are frequent.
    return bytes(rng.choice(b"\x00ab\xff") for _ in range(rng.randint(0, 3)))


@pytest.mark.parametrize("seed", range(40))
def test_merge_matches_a_dict_model_on_random_data(seed):
    rng = random.Random(seed)
    base = {_random_key(rng): b"base%d" % i for i in range(rng.randint(0, 30))}
    overlay: dict[bytes, bytes | None] = {}
    for i in range(rng.randint(0, 30)):
        overlay[_random_key(rng)] = None if rng.random() < 0.4 else b"over%d" % i

    model = dict(base)
    for key, value in overlay.items():
        if value is None:
            model.pop(key, None)
        else:
            model[key] = value
    expected = sorted(model.items())

    for reverse in (False, True):
        got = merged(
            sorted(base.items(), reverse=reverse),
            sorted(overlay.items(), reverse=reverse),
            reverse=reverse,
        )
        assert got == (expected[::-1] if reverse else expected), f"seed={seed} reverse={reverse}"
