"""The refusal at start: v2 on state v1 wrote fails fast naming the store and the difference,
unless allow_incompatible_state; no fingerprint on disk starts and records one."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from statekeeper.versions import (
    IncompatibleStateError,
    check_state_version,
    read_recorded,
    write_recorded,
)

from .apps import Version, fingerprint

V1 = Version()
V2_SERDE = Version(counts_value_serde="json")


def test_incompatible_state_fails_naming_the_store_and_the_difference(tmp_path: Path) -> None:
    write_recorded(tmp_path, fingerprint(V1))
    with pytest.raises(IncompatibleStateError) as caught:
        check_state_version(tmp_path, fingerprint(V2_SERDE))
    message = str(caught.value)
    assert "\n" not in message
    assert "store counts: value serde int -> json (needs-migration)" in message
    assert str(tmp_path / "topology.json") in message
    assert "statekeeper upgrade plan --app SPEC" in message
    assert "allow_incompatible_state" in message
    assert caught.value.plan is not None and not caught.value.plan.compatible
    assert read_recorded(tmp_path) == fingerprint(V1)  # refused: the record stays


def test_a_source_with_more_partitions_fails(tmp_path: Path) -> None:
    write_recorded(tmp_path, fingerprint(V1, partitions=4))
    with pytest.raises(IncompatibleStateError, match=r"source lines: 4 -> 6 partitions"):
        check_state_version(tmp_path, fingerprint(V1, partitions=6))


def test_the_opt_out_starts_and_records_the_new_version(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_recorded(tmp_path, fingerprint(V1))
    with caplog.at_level(logging.INFO, logger="statekeeper.versions"):
        plan = check_state_version(tmp_path, fingerprint(V2_SERDE), allow_incompatible=True)
    assert plan is not None and not plan.compatible
    assert read_recorded(tmp_path) == fingerprint(V2_SERDE)
    assert "store counts: value serde int -> json" in caplog.text


def test_compatible_changes_start_and_are_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_recorded(tmp_path, fingerprint(V1))
    v2 = Version(lengths=True, retention_ms=240_000)
    with caplog.at_level(logging.INFO, logger="statekeeper.versions"):
        plan = check_state_version(tmp_path, fingerprint(v2))
    assert plan is not None and plan.compatible
    assert "store lengths: new" in caplog.text and "retention 120000 -> 240000" in caplog.text
    assert read_recorded(tmp_path) == fingerprint(v2)


def test_no_fingerprint_starts_and_records_one(tmp_path: Path) -> None:
    root = tmp_path / "wc"
    assert check_state_version(root, fingerprint(V1)) is None
    assert read_recorded(root) == fingerprint(V1)


def test_without_a_record_in_the_root_the_snapshots_one_counts(tmp_path: Path) -> None:
    asked = []

    def snapshot_record():
        asked.append(True)
        return "snapshot 20260101T000000-1_0-counts-b7", fingerprint(V1)

    with pytest.raises(IncompatibleStateError, match="snapshot 20260101T000000-1_0-counts-b7"):
        check_state_version(tmp_path, fingerprint(V2_SERDE), recorded_elsewhere=snapshot_record)
    write_recorded(tmp_path, fingerprint(V2_SERDE))
    assert check_state_version(
        tmp_path, fingerprint(V2_SERDE), recorded_elsewhere=snapshot_record
    ).compatible  # type: ignore[union-attr]
    assert len(asked) == 1  # the root's record wins; the snapshots are not read


def test_an_unreadable_record_fails_unless_allowed(tmp_path: Path) -> None:
    (tmp_path / "topology.json").write_text("{not json")
    with pytest.raises(IncompatibleStateError, match="topology.json is not valid JSON"):
        check_state_version(tmp_path, fingerprint(V1))
    assert check_state_version(tmp_path, fingerprint(V1), allow_incompatible=True) is None
    assert read_recorded(tmp_path) == fingerprint(V1)
