"""Helpers to drive the counting worker in real subprocesses and check it against the model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from statekeeper.kafka.adapter import producer_config
from tests.integration.counting_events import Event, ExpectedState, recompute

REPO_ROOT = Path(__file__).resolve().parents[2]


def produce_events(bootstrap: str, admin: Any, topic: str, events: list[Event]) -> None:
    from statekeeper.kafka.admin import ensure_topic

    ensure_topic(admin, topic, 1, {})
    producer = Producer(producer_config(bootstrap))
    for ev in events:
        producer.produce(topic, ev.encode(), ev.key.encode(), 0)
    assert producer.flush(30) == 0


def run_worker(
    bootstrap: str, topic: str, state_dir: Path, app: str, *extra: str, expect_kill: bool = False
) -> dict[str, Any] | None:
    summary = state_dir.parent / f"summary-{app}.json"
    summary.unlink(missing_ok=True)
    cmd = [
        sys.executable, "-m", "tests.integration.counting_worker",
        "--bootstrap", bootstrap, "--topic", topic, "--state-dir", str(state_dir),
        "--application-id", app, "--summary", str(summary), *extra,
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=REPO_ROOT)
    if expect_kill:
        assert proc.returncode == -9, f"expected SIGKILL, got {proc.returncode}: {proc.stderr}"
        return None
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(summary.read_text())


def assert_state_matches(summary: dict[str, Any], expected: ExpectedState) -> None:
    state = summary["state"]
    assert state["counts"] == expected.counts
    assert state["mem-counts"] == expected.counts
    assert state["recent-counts"] == expected.lru
    assert len(state["recent-counts"]) <= 16
    windows = {(k, s): n for k, s, n in state["window-counts"]}
    assert windows == expected.windows


def expected_for(events: list[Event]) -> ExpectedState:
    return recompute(events)
