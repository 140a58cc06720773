"""Kill -9 at every commit step, restart, and compare all four stores with a recomputation."""

from __future__ import annotations

import shutil

import pytest

from tests.integration.counting_events import generate_events

from .counting import assert_state_matches, expected_for, produce_events, run_worker

pytestmark = pytest.mark.slow

EVENTS = generate_events(2_400, keys=40, seed=11)  # 12 batches of 200


@pytest.fixture
def input_topic(broker, admin, topic_name):
    produce_events(broker.bootstrap_servers, admin, topic_name, EVENTS)
    return topic_name


def test_clean_run_matches_recomputation(broker, input_topic, tmp_path):
    summary = run_worker(broker.bootstrap_servers, input_topic, tmp_path / "state", "clean")
    assert summary["processed"] == len(EVENTS)
    assert_state_matches(summary, expected_for(EVENTS))


@pytest.mark.parametrize(
    "crashes",
    [
        ["mid_batch:2", "produced:4", "marked:6", "stored:8", "committed:10"],
        ["marked:0", "mid_batch:1", "produced:1", "marked:1"],
    ],
    ids=["every-step", "repeated-same-batch"],
)
def test_kill9_at_each_commit_step_restores_exactly(broker, input_topic, tmp_path, crashes):
    bootstrap, state = broker.bootstrap_servers, tmp_path / "state"
    app = "crash-" + "-".join(c.replace(":", "") for c in crashes)[:60]
    for crash in crashes:
        run_worker(bootstrap, input_topic, state, app, "--crash-at", crash, expect_kill=True)
    summary = run_worker(bootstrap, input_topic, state, app)
    assert_state_matches(summary, expected_for(EVENTS))
    # Intact local state: the persistent stores resumed from their checkpoints.
    by_store = {r["store"]: r for r in summary["restores"]}
    assert not by_store["counts"]["full"] and not by_store["window-counts"]["full"]
    assert by_store["mem-counts"]["full"] and by_store["recent-counts"]["full"]

    # Deleting the state directory restores everything from the changelogs, including the
    # uncommitted tails the crashes left there (reverted or rolled forward on restart).
    shutil.rmtree(state)
    summary = run_worker(bootstrap, input_topic, state, app)
    assert summary["processed"] == 0
    assert_state_matches(summary, expected_for(EVENTS))
    assert all(r["full"] for r in summary["restores"])


def test_restart_with_intact_state_replays_only_the_tail(broker, admin, topic_name, tmp_path):
    bootstrap, state = broker.bootstrap_servers, tmp_path / "state"
    first, second = EVENTS[:1_200], EVENTS[1_200:]
    produce_events(bootstrap, admin, topic_name, first)
    summary = run_worker(bootstrap, topic_name, state, "tail")
    assert_state_matches(summary, expected_for(first))

    # Something else moves the changelog on while this state sits on disk: a second state
    # directory processes the rest, then the first one restarts and must replay only that.
    other = tmp_path / "other-state"
    shutil.copytree(state, other)
    produce_events(bootstrap, admin, topic_name, second)
    run_worker(bootstrap, topic_name, other, "tail")
    summary = run_worker(bootstrap, topic_name, state, "tail")
    by_store = {r["store"]: r for r in summary["restores"]}
    counts = by_store["counts"]
    assert not counts["full"] and counts["start_offset"] > 0
    # Only the second half's changelog records were replayed (caching dedupes per batch).
    assert 0 < counts["restored_records"] < len(second) + 20
    assert summary["processed"] == 0
    assert_state_matches(summary, expected_for(EVENTS))
