"""Counting the librdkafka clients alive in this process (tests of close paths)."""

from __future__ import annotations

import contextlib
import gc
from pathlib import Path


def open_kafka_clients() -> int:
    """Producers, consumers and admin clients not yet destroyed: each runs one ``rdk:main``
    thread from creation until it is closed (or garbage collected)."""
    count = 0
    for comm in Path("/proc/self/task").glob("*/comm"):
        with contextlib.suppress(OSError):  # the thread ended while we looked
            count += comm.read_text().startswith("rdk:main")
    return count


def settled_kafka_clients() -> int:
    """:func:`open_kafka_clients` after a garbage collection, as a baseline: what earlier
    code left to the collector is gone, so what remains later was not closed."""
    gc.collect()
    return open_kafka_clients()
