"""The bounded run a backfill is, without Spark: the source's batch ends capped at the
until offsets, the app's stop condition (until reached, repartition topics read to their
end), positions seeded from an explicit start, the recorded start, the batch listener."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statekeeper.app.recorded_start import record_start
from statekeeper.app.statekeeper_app import StatekeeperApp
from statekeeper.app.topics import TopicPlan
from statekeeper.backfill.report import Progress
from statekeeper.kafka.model import OffsetRange
from statekeeper.processing.dsl import Grouped, Materialized, StreamsBuilder
from statekeeper.settings import StatekeeperSettings
from statekeeper.spark.kafka_source import KafkaRangesStreamReader
from statekeeper.spark.offset_planning import cap_offsets, parse_source_options
from statekeeper.worker.task_run import TaskRun, TaskRunResult

REP = "bf-words-repartition"
L0, L1, R0, R1 = ("lines", 0), ("lines", 1), (REP, 0), (REP, 1)


class FakeEnds:
    def __init__(self, ends: dict[tuple[str, int], int]) -> None:
        self.ends = ends

    def read(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: self.ends[tp] for tp in tps}

    def close(self) -> None:
        pass


def _topology() -> Any:
    builder = StreamsBuilder()
    lines = builder.stream("lines", key_serde="bytes", value_serde="str")
    lines.flat_map_values(str.split).group_by(
        lambda _k, word: word, Grouped.as_("words").with_key_serde("str").with_value_serde("str")
    ).count(Materialized.as_("counts").with_serdes("str", "int"))
    return builder.build()


def _app(tmp_path: Path, stop_at: dict | None, **settings: Any) -> StatekeeperApp:
    s = StatekeeperSettings(
        application_id="bf",
        state_dir=tmp_path / "state",
        checkpoint_dir=tmp_path / "cp",
        status_port=None,
        **settings,
    )
    app = StatekeeperApp(_topology(), s, stop_at_offsets=stop_at)
    app._plan = TopicPlan({"lines": 2, REP: 2}, [(0, 0), (0, 1), (1, 0), (1, 1)])
    return app


def test_cap_offsets_caps_only_named_partitions() -> None:
    ends = {L0: 100, L1: 20, R0: 7}
    assert cap_offsets(ends, None) == ends == cap_offsets(ends, {})
    assert cap_offsets(ends, {L0: 50, L1: 30}) == {L0: 50, L1: 20, R0: 7}


def test_the_stream_source_plans_no_batch_end_past_stop_at() -> None:
    options = parse_source_options(
        {
            "kafka.bootstrap.servers": "127.0.0.1:1",
            "subscribe": f"lines,{REP}",
            "stopAtOffsets": '{"lines": {"0": 50, "1": 30}}',
        },
        streaming=True,
    )
    assert options.stop_at == {L0: 50, L1: 30}
    reader = KafkaRangesStreamReader(options)
    available = {L0: 100, L1: 20, R0: 9, R1: 0}
    reader.planner.topic_partitions = lambda: sorted(available)  # type: ignore[method-assign]
    reader.planner.latest = lambda tps: dict(available)  # type: ignore[method-assign]
    start = {"lines": {"0": 10, "1": 5}, REP: {"0": 0, "1": 0}}
    # Under a batch limit the fair share applies; the stop offset caps what is available.
    assert reader.latestOffset(start, None) == {"lines": {"0": 50, "1": 20}, REP: {"0": 9, "1": 0}}
    from pyspark.sql.streaming.datasource import ReadMaxRows

    assert reader.latestOffset(start, ReadMaxRows(30)) == {
        "lines": {"0": 21, "1": 15},  # 30 records shared fairly
        REP: {"0": 9, "1": 0},
    }
    # At the stop offsets the source runs dry: no new batch (repartition records still come).
    done = {"lines": {"0": 50, "1": 20}, REP: {"0": 9, "1": 0}}
    assert reader.latestOffset(done, None) == done
    # A partition already past its stop offset stays where it is.
    past = {"lines": {"0": 60, "1": 20}, REP: {"0": 9, "1": 0}}
    assert reader.latestOffset(past, None) == past


def test_stop_at_is_checked_like_the_other_offset_options() -> None:
    import pytest

    from statekeeper.errors import ConfigError

    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "lines"}
    for value, says in (
        ("latest", "expected JSON like"),
        ('{"lines": {"0": -1}}', "offset of lines[0] must be >= 0, got -1"),
        ('{"other": {"0": 1}}', "names topic(s) other that are not in 'subscribe'"),
    ):
        with pytest.raises(ConfigError, match="stopAtOffsets") as info:
            parse_source_options({**base, "stopAtOffsets": value}, streaming=True)
        assert says in str(info.value)
    with pytest.raises(ConfigError, match="for streaming queries only"):
        parse_source_options({**base, "stopAtOffsets": '{"lines": {"0": 1}}'}, streaming=False)
    assert parse_source_options(base, streaming=True).stop_at is None


def test_a_bounded_run_stops_at_until_with_the_repartition_topic_read(tmp_path: Path) -> None:
    app = _app(tmp_path, {L0: 50, L1: 30})
    app._end_reader = FakeEnds({L0: 100, L1: 20, R0: 10, R1: 0})
    app._positions = {L0: 50, L1: 20, R0: 8}
    app._refresh_ends()
    assert app._ends == {L0: 50, L1: 20, R0: 10, R1: 0}  # sources capped, repartition not
    assert not app._caught_up()  # the downstream task has repartition records to read
    app._positions[R0] = 10
    assert app._caught_up()
    app._positions[L0] = 49
    assert not app._caught_up()
    # The same positions in an ordinary run: not caught up (lines[0] ends at 100).
    plain = _app(tmp_path, None)
    plain._end_reader = FakeEnds({L0: 100, L1: 20, R0: 10, R1: 0})
    plain._positions = {L0: 50, L1: 20, R0: 10}
    plain._refresh_ends()
    assert plain._ends[L0] == 100 and not plain._caught_up()


def test_positions_seeded_from_an_explicit_start_only_in_a_bounded_run(tmp_path: Path) -> None:
    # A partition with nothing below its until offset never appears in a batch: its start
    # is its position, else the run would wait for it forever.
    app = _app(tmp_path, {L0: 40, L1: 30})
    app._positions = {L0: 12}  # committed in Spark's checkpoint: kept
    app._seed_positions('{"lines": {"0": 5, "1": 30}}')
    assert app._positions == {L0: 12, L1: 30}
    app._seed_positions("earliest")  # nothing explicit: nothing seeded
    assert app._positions == {L0: 12, L1: 30}


def test_the_recorded_start_wins_over_the_setting(tmp_path: Path) -> None:
    app = _app(tmp_path, None, starting_offsets="latest")
    assert app._starting_offsets() == "latest"
    record_start(app.checkpoint, {L0: 3, L1: 4}, "earliest")
    assert app._starting_offsets() == '{"lines":{"0":3,"1":4}}'


def test_batch_listeners_get_each_batch_and_the_positions(tmp_path: Path) -> None:
    app = _app(tmp_path, {L0: 50, L1: 30})
    lines: list[str] = []
    seen: list[tuple[int, dict]] = []
    app.add_batch_listener(lambda batch, positions: seen.append((batch["batch_id"], positions)))
    app.add_batch_listener(lambda batch, positions: 1 / 0)  # a broken one changes nothing
    app.add_batch_listener(Progress({L0: 50, L1: 30}, {L0: 0, L1: 10}, lines.append))
    runs = [
        TaskRun("0_0", 0, 0, (OffsetRange("lines", 0, 0, 20),), 3, 0),
        TaskRun("0_1", 0, 1, (OffsetRange("lines", 1, 10, 30),), 3, 0),
    ]
    results = [TaskRunResult("0_0", 3, True, records_processed=20)]
    app._record(3, runs, results, 0.5)
    assert seen == [(3, {L0: 20, L1: 30})]
    assert lines == [
        "batch 3: 40 source records (20 processed) in 0.50 s; 30 source records left below --until"
    ]
