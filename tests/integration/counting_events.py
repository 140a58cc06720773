"""Deterministic input for the counting worker, and the reference model it must agree with.

Each input record has a string key and a JSON value ``{"op": "add"|"delete", "ts": ms}``.
The reference model recomputes every store's expected content without touching a store,
so the fault tests compare the restored state with an independent computation.
"""

from __future__ import annotations

import json
import random
from collections import OrderedDict
from dataclasses import dataclass

WINDOW_SIZE_MS = 1_000
WINDOW_RETENTION_MS = 5_000
LRU_CAPACITY = 16


@dataclass(frozen=True)
class Event:
    key: str
    op: str  # "add" or "delete"
    ts: int

    def encode(self) -> bytes:
        return json.dumps({"op": self.op, "ts": self.ts}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> Event:
        raw = json.loads(value)
        return cls(key.decode(), raw["op"], int(raw["ts"]))


def generate_events(count: int, keys: int, seed: int = 7) -> list[Event]:
    """``count`` events over ``keys`` keys; ~3 % deletes, timestamps rising with late ones."""
    rng = random.Random(seed)
    events, ts = [], 0
    for _ in range(count):
        ts += rng.randint(0, 40)
        late = rng.random() < 0.05
        event_ts = max(0, ts - rng.randint(1_000, 8_000)) if late else ts
        op = "delete" if rng.random() < 0.03 else "add"
        events.append(Event(f"k{rng.randrange(keys):04d}", op, event_ts))
    return events


@dataclass
class ExpectedState:
    """What each store of the counting worker must hold after processing some events."""

    counts: dict[str, int]
    lru: dict[str, int]
    windows: dict[tuple[str, int], int]


def recompute(events: list[Event]) -> ExpectedState:
    """Apply ``events`` in order with the worker's semantics, using plain dicts."""
    counts: dict[str, int] = {}
    lru: OrderedDict[str, int] = OrderedDict()
    windows: dict[tuple[str, int], int] = {}
    observed = -1
    for ev in events:
        if ev.op == "delete":
            counts.pop(ev.key, None)
            lru.pop(ev.key, None)
            continue
        counts[ev.key] = counts.get(ev.key, 0) + 1
        lru[ev.key] = lru.pop(ev.key, 0) + 1  # get then put: most recently used
        while len(lru) > LRU_CAPACITY:
            lru.popitem(last=False)
        start = ev.ts - ev.ts % WINDOW_SIZE_MS
        if observed >= 0 and start < observed - WINDOW_RETENTION_MS + 1:
            continue  # window already past retention: dropped
        observed = max(observed, start)
        windows[(ev.key, start)] = windows.get((ev.key, start), 0) + 1
    min_live = observed - WINDOW_RETENTION_MS + 1
    live_windows = {kw: n for kw, n in windows.items() if kw[1] >= min_live}
    return ExpectedState(counts, dict(lru), live_windows)
