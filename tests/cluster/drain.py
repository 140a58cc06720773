"""Waiting until a running app has processed everything produced so far."""

from __future__ import annotations

import time
from typing import Any

from statekeeper.errors import StatekeeperError
from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.offsets import log_end_offsets


def wait_drained(proc: Any, bootstrap: str, timeout_s: float = 240) -> dict[str, Any]:
    """Wait until the app (an ``AppProcess``) has processed every source partition up to its
    end as the broker reports it, repartition topics included, and the ends did not move
    meanwhile (processing the input feeds the repartition topics). The status document's
    own ends are refreshed every few seconds, so right after a produce they may be old."""
    conf = consumer_config(bootstrap, group_id="statekeeper-tests-drain")
    deadline = time.monotonic() + timeout_s
    previous: dict[tuple[str, int], int] | None = None
    while time.monotonic() < deadline:
        status = proc.status() or {}
        tps = [(p["topic"], p["partition"]) for p in status.get("source_partitions") or []]
        if not tps:
            time.sleep(0.2)
            continue
        ends = log_end_offsets(conf, tps)
        left = max(1.0, deadline - time.monotonic())
        status = proc.wait_for(
            lambda s, e=ends: all(
                {
                    (p["topic"], p["partition"]): p["position"]
                    for p in s.get("source_partitions") or []
                }.get(tp, -1)
                >= end
                for tp, end in e.items()
            ),
            left,
        )
        if ends == previous:
            return status
        previous = ends
    raise StatekeeperError(f"app not drained within {timeout_s:.0f}s")
