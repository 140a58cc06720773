"""The cyclic GC paused around read loops (statekeeper.gc_pause)."""

from __future__ import annotations

import gc
import threading

from statekeeper.gc_pause import cycle_gc_paused


def test_nested_and_concurrent_pauses_enable_the_collector_when_the_last_one_leaves() -> None:
    assert gc.isenabled()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with cycle_gc_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with cycle_gc_paused():
        thread.start()
        assert inside.wait(10)
        with cycle_gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread is still inside
    release.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    try:
        with cycle_gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_comes_back_after_an_exception() -> None:
    try:
        with cycle_gc_paused():
            raise KeyError("x")
    except KeyError:
        pass
    assert gc.isenabled()
