"""Pure decision logic of the changelog audit: which offsets ``--trim`` deletes below (and
when it refuses), cleaner tuning only where the broker compacts, the restore forecast and
where its rate comes from."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from statekeeper.errors import ChangelogTopicError
from statekeeper.kafka.adapter import KAFKA, TANSU
from statekeeper.ops.audit.cleaner import MIN_COMPACTION_LAG_MS, check_cleaner
from statekeeper.ops.audit.fixes import planned_changes
from statekeeper.ops.audit.forecast import (
    DEFAULT_RESTORE_RATE,
    RestoreRate,
    choose_restore_rate,
    forecast_topic,
    kept_markers,
)
from statekeeper.ops.audit.trim import apply_trim, plan_trim

T = "app-totals-changelog"


def _manifest(partition: int, marker: int | None, created: str, topic: str = T):
    return SimpleNamespace(
        snapshot_id=f"s-{partition}-{marker}",
        changelog_topic=topic,
        changelog_partition=partition,
        marker_offset=marker,
        created_at=created,
    )


MANIFESTS = [
    _manifest(0, 100, "2026-11-25T01:00:00"),
    _manifest(0, 400, "2026-11-25T02:00:00"),
    _manifest(0, 250, "2026-11-25T01:30:00"),
    _manifest(1, 70, "2026-11-25T01:00:00"),
    _manifest(2, None, "2026-11-25T01:00:00"),  # a store snapshot without a changelog marker
    _manifest(0, 5, "2026-11-25T01:00:00", topic="app-other-changelog"),
]
OFFSETS = {(T, 0): (0, 1000), (T, 1): (70, 90), (T, 2): (0, 50), (T, 3): (0, 10)}


def test_trim_goes_below_the_oldest_kept_marker_of_each_partition():
    markers = kept_markers(MANIFESTS)
    assert sorted(markers[(T, 0)]) == [100, 250, 400]
    plan = plan_trim(KAFKA, OFFSETS, markers, verified={(T, 0): True, (T, 1): True})
    assert plan.refused is None
    # Partition 0: the oldest kept marker (100), never the newest (400), so every kept
    # snapshot can still be restored from.
    assert [(a.partition, a.trim_to, a.records) for a in plan.actions] == [(0, 100, 100)]
    reasons = {s.partition: s.reason for s in plan.skipped}
    assert "nothing below" in reasons[1]  # log already starts at the marker
    assert "no snapshot" in reasons[2]  # only a marker-less manifest
    assert "no snapshot" in reasons[3]


def test_trim_skips_a_partition_whose_newest_snapshot_did_not_verify():
    plan = plan_trim(KAFKA, OFFSETS, kept_markers(MANIFESTS), verified={(T, 0): False})
    assert plan.actions == []
    assert "did not verify" in next(s.reason for s in plan.skipped if s.partition == 0)


def test_trim_is_refused_where_the_broker_has_no_delete_records():
    plan = plan_trim(TANSU, OFFSETS, kept_markers(MANIFESTS), verified={(T, 0): True})
    assert plan.refused and "DeleteRecords" in plan.refused
    assert plan.actions == [] and plan.skipped == []

    class Admin:
        def delete_records(self, *args, **kwargs):
            raise AssertionError("called")

    with pytest.raises(ChangelogTopicError, match="DeleteRecords"):
        apply_trim(Admin(), TANSU, plan)


def test_trim_never_goes_past_the_log_end():
    plan = plan_trim(KAFKA, {(T, 0): (0, 60)}, {(T, 0): [100]}, verified={(T, 0): True})
    assert [(a.trim_to, a.records) for a in plan.actions] == [(60, 60)]


def test_profiles_say_where_compaction_and_delete_records_work():
    assert KAFKA.compacts and KAFKA.delete_records
    assert not TANSU.compacts and not TANSU.delete_records


def test_cleaner_tuning_only_where_the_broker_compacts():
    configs = {"min.cleanable.dirty.ratio": "0.5", "segment.ms": "604800000"}
    here = check_cleaner(configs, compacts=False, superseded_share=0.9)
    assert [(f.aspect, f.severity, f.fix) for f in here] == [("compaction", "info", None)]

    kafka = {f.aspect: f for f in check_cleaner(configs, compacts=True, superseded_share=0.9)}
    assert kafka["min.cleanable.dirty.ratio"].fix == "0.1"
    assert kafka["segment.ms"].fix == str(24 * 3600 * 1000)
    assert kafka["min.compaction.lag.ms"].fix == str(MIN_COMPACTION_LAG_MS)
    changes = planned_changes(T, kafka.values(), configs)
    assert {c.key: c.after for c in changes} == {
        "min.cleanable.dirty.ratio": "0.1",
        "segment.ms": "86400000",
        "min.compaction.lag.ms": str(MIN_COMPACTION_LAG_MS),
    }
    # A mostly live log keeps the default ratio; a window changelog's segment.ms follows a
    # retention shorter than a day; a long enough lag is fine.
    tuned = {
        f.aspect: f
        for f in check_cleaner(
            {"segment.ms": "7200000", "min.compaction.lag.ms": str(MIN_COMPACTION_LAG_MS)},
            compacts=True,
            superseded_share=0.2,
            retention_ms=3_600_000,
        )
    }
    assert "min.cleanable.dirty.ratio" not in tuned
    assert tuned["segment.ms"].fix == "3600000"
    assert tuned["min.compaction.lag.ms"].severity == "info"


def test_forecast_full_replay_vs_newest_snapshot_and_tail():
    rate = RestoreRate(1000.0, "given", "test")
    forecast = forecast_topic(T, {0: 0, 1: 0, 2: 0}, {0: 1000, 1: 200, 2: 50}, MANIFESTS, rate)
    by_partition = {p.partition: p for p in forecast.partitions}
    assert by_partition[0].marker_offset == 400  # the newest snapshot's
    assert by_partition[0].tail_records == 599
    assert by_partition[1].tail_records == 129
    assert by_partition[2].snapshot_id is None and by_partition[2].tail_records == 50
    assert forecast.full_records == 1250 and forecast.tail_records == 778
    assert forecast.full_restore_seconds == pytest.approx(1.25)
    assert forecast.snapshot_tail_seconds == pytest.approx(0.778)
    assert forecast.cut_records == 472 and forecast.fresh_snapshot_cut_records == 778
    # Measured records (compaction gaps) replace the offset span for the full replay.
    measured = forecast_topic(T, {0: 0}, {0: 1000}, MANIFESTS, rate, measured_records=700)
    assert measured.full_records == 700 and measured.tail_records == 599


def test_restore_rate_given_measured_or_default(tmp_path):
    status = tmp_path / "status.json"
    assert choose_restore_rate(None, status).source == "default"
    status.write_text(
        json.dumps(
            {
                "tasks": {
                    "0_0": {"restore": [{"records": 30_000, "seconds": 0.1}]},
                    "0_1": {"restore": [{"records": 10_000, "seconds": 0.1}, {"records": 0}]},
                }
            }
        )
    )
    measured = choose_restore_rate(None, status)
    assert measured.source == "measured" and measured.records_per_s == pytest.approx(200_000)
    assert "2 restore(s)" in measured.detail
    status.write_text(json.dumps({"tasks": {"0_0": {"restore": [{"records": 500, "seconds": 1}]}}}))
    small = choose_restore_rate(None, status)
    assert small.source == "default" and small.records_per_s == DEFAULT_RESTORE_RATE
    assert choose_restore_rate(123.0, status) == RestoreRate(123.0, "given", "--restore-rate")
    with pytest.raises(ValueError):
        choose_restore_rate(0, status)
