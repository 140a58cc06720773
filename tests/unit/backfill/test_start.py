"""Where a backfill's query starts, from what the app has done before (pure decisions, and
the facts read from a checkpoint and state directory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.app.recorded_start import RecordedStart, read_start, record_start
from statekeeper.backfill.bounds import FromSpec
from statekeeper.backfill.start import FROM_SETTING, AppHistory, decide_start, read_history
from statekeeper.errors import ConfigError, StatekeeperError
from statekeeper.settings import StatekeeperSettings

CP = Path("/cp/app")
TS = FromSpec(1_700_000_000_000)


def test_a_fresh_app_starts_at_from_and_records_it() -> None:
    fresh = AppHistory(CP)
    plan = decide_start(fresh, FromSpec())
    assert (plan.continues, plan.record) == (False, "earliest")
    plan = decide_start(fresh, TS)
    assert (plan.continues, plan.record) == (False, str(TS.timestamp_ms))
    assert "a fresh app, from 1700000000000" in plan.note


def test_an_app_that_ran_continues_from_its_checkpoint() -> None:
    ran = AppHistory(CP, committed_batch=7, logged_batches=True)
    plan = decide_start(ran, FromSpec())
    assert plan.continues and plan.record is None
    assert "continues from its checkpoint at micro-batch 7" in plan.note
    # Its first micro-batch never committed (the app was killed in it): the start the app
    # would use is recorded, so the batch runs again from there.
    first = AppHistory(CP, logged_batches=True)
    assert decide_start(first, FromSpec()).record == FROM_SETTING


def test_a_backfill_run_again_continues_and_may_repeat_its_from() -> None:
    recorded = RecordedStart({("lines", 0): 10}, str(TS.timestamp_ms))
    history = AppHistory(CP, committed_batch=3, logged_batches=True, recorded=recorded)
    for from_spec in (FromSpec(), TS):
        plan = decide_start(history, from_spec)
        assert plan.continues and plan.record is None
        assert f"continues the backfill from {TS.timestamp_ms} at micro-batch 3" in plan.note
    with pytest.raises(ConfigError, match="started at offsets chosen by '1700000000000'"):
        decide_start(history, FromSpec(5))


@pytest.mark.parametrize(
    ("history", "says"),
    [
        (AppHistory(CP, committed_batch=0, logged_batches=True), "Spark checkpoint"),
        (AppHistory(CP, takeover=True), "migrated from an older version"),
        (AppHistory(CP, committed_state="task 1_0 has committed state"), "task 1_0 has"),
        (AppHistory(CP, committed_state="its changelog x holds records"), "changelog x"),
    ],
)
def test_from_a_timestamp_is_refused_on_an_app_that_ran(history: AppHistory, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        decide_start(history, TS)
    message = str(info.value)
    assert message.startswith("--from 1700000000000: only a fresh app starts at a timestamp")
    assert says in message and "\n" not in message


def test_state_without_a_checkpoint_and_a_takeover() -> None:
    plan = decide_start(AppHistory(CP, committed_state="task 1_0 has committed state"), FromSpec())
    assert (plan.continues, plan.record) == (False, "earliest")
    assert "tasks skip what they committed" in plan.note
    plan = decide_start(AppHistory(CP, takeover=True), FromSpec())
    assert plan.continues and plan.record is None


def test_history_read_from_the_checkpoint_and_state_dir(tmp_path: Path) -> None:
    from statekeeper.processing.dsl import Materialized, StreamsBuilder

    builder = StreamsBuilder()
    builder.stream("lines").group_by_key().count(Materialized.as_("counts"))
    topology = builder.build()
    settings = StatekeeperSettings(
        application_id="bf", state_dir=tmp_path / "state", checkpoint_dir=tmp_path / "cp"
    )
    cp = tmp_path / "cp" / "bf"
    assert read_history(settings, topology, cp) == AppHistory(cp)
    (cp / "offsets").mkdir(parents=True)
    (cp / "offsets" / "0").write_text("v1\n{}\n{}")
    record_start(cp, {("lines", 0): 4}, "earliest")
    task = tmp_path / "state" / "bf" / "0_0"
    task.mkdir(parents=True)
    history = read_history(settings, topology, cp, {"bf-counts-changelog": 0})
    assert history.logged_batches and history.committed_batch is None
    assert history.recorded == RecordedStart({("lines", 0): 4}, "earliest")
    assert history.committed_state is None  # a task directory that never committed
    (task / ".checkpoint").write_text("{}")
    assert "task 0_0 has committed state" in str(
        read_history(settings, topology, cp).committed_state
    )
    (task / ".checkpoint").unlink()
    history = read_history(settings, topology, cp, {"bf-counts-changelog": 3})
    assert history.committed_state == "its changelog bf-counts-changelog holds records"


def test_the_recorded_start_round_trips_and_a_damaged_one_is_an_error(tmp_path: Path) -> None:
    assert read_start(tmp_path) is None
    record_start(tmp_path, {("b", 1): 5, ("a", 0): 3}, "123")
    recorded = read_start(tmp_path)
    assert recorded == RecordedStart({("a", 0): 3, ("b", 1): 5}, "123")
    assert recorded.starting_offsets_json() == '{"a":{"0":3},"b":{"1":5}}'
    (tmp_path / "statekeeper-start.json").write_text("{broken")
    with pytest.raises(StatekeeperError, match="cannot read the query's recorded start"):
        read_start(tmp_path)
