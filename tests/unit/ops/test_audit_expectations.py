"""The pure expectation logic of changelog audits: configs in, findings and verdict out."""

from __future__ import annotations

import pytest

from statekeeper.ops.audit.expectations import (
    check_configs,
    check_partitions,
    expectation_for,
)
from statekeeper.ops.audit.findings import Finding, verdict_of
from statekeeper.ops.audit.fixes import planned_changes
from statekeeper.stores.builders import WINDOW_CHANGELOG_EXTRA_RETENTION_MS, Stores

SIZE, GRACE, RETENTION = 10_000, 2_000, 100_000
WANTED = RETENTION + WINDOW_CHANGELOG_EXTRA_RETENTION_MS
KV = expectation_for(Stores.persistent("counts"), 4)
WINDOW = expectation_for(
    Stores.window("w", size_ms=SIZE, retention_ms=RETENTION, grace_ms=GRACE), 4
)


def _aspect(findings: list[Finding], aspect: str) -> Finding:
    return next(f for f in findings if f.aspect == aspect)


@pytest.mark.parametrize(
    ("expected", "configs", "aspect", "severity", "fix"),
    [
        # key-value stores: compact only
        (KV, {"cleanup.policy": "compact"}, "cleanup.policy", "info", None),
        (KV, {}, "cleanup.policy", "unknown", None),
        (KV, {"cleanup.policy": "delete"}, "cleanup.policy", "fail", "compact"),
        (KV, {"cleanup.policy": "compact,delete"}, "cleanup.policy", "fail", "compact"),
        # window stores: compact,delete (order and case do not matter)
        (WINDOW, {"cleanup.policy": "Delete, compact"}, "cleanup.policy", "info", None),
        (WINDOW, {"cleanup.policy": "compact"}, "cleanup.policy", "warn", "compact,delete"),
        (WINDOW, {"cleanup.policy": "delete"}, "cleanup.policy", "fail", "compact,delete"),
        # window retention: floor size + grace, store retention, then the margin
        (WINDOW, {}, "retention.ms", "unknown", None),
        (WINDOW, {"retention.ms": str(WANTED)}, "retention.ms", "info", None),
        (WINDOW, {"retention.ms": "-1"}, "retention.ms", "info", None),
        (WINDOW, {"retention.ms": str(SIZE + GRACE - 1)}, "retention.ms", "fail", str(WANTED)),
        (WINDOW, {"retention.ms": str(RETENTION - 1)}, "retention.ms", "fail", str(WANTED)),
        (WINDOW, {"retention.ms": str(RETENTION)}, "retention.ms", "warn", str(WANTED)),
        (WINDOW, {"retention.ms": "soon"}, "retention.ms", "fail", str(WANTED)),
        # cleaner and segment tuning: reported, warned when harmful, never fixed
        (KV, {"min.cleanable.dirty.ratio": "0.5"}, "min.cleanable.dirty.ratio", "info", None),
        (KV, {"min.cleanable.dirty.ratio": "0.95"}, "min.cleanable.dirty.ratio", "warn", None),
        (
            WINDOW,
            {"segment.ms": str(WANTED + 1), "retention.ms": str(WANTED)},
            "segment.ms",
            "warn",
            None,
        ),
    ],
)
def test_config_findings(expected, configs, aspect, severity, fix) -> None:
    finding = [f for f in check_configs(expected, configs) if f.aspect == aspect][-1]
    assert (finding.severity, finding.fix) == (severity, fix), finding.message


def test_short_retention_names_size_plus_grace() -> None:
    finding = _aspect(check_configs(WINDOW, {"retention.ms": "5"}), "retention.ms")
    assert "window size + grace (12000 ms)" in finding.message


def test_key_value_stores_have_no_retention_expectation() -> None:
    aspects = {f.aspect for f in check_configs(KV, {"retention.ms": "1"})}
    assert "retention.ms" not in aspects


@pytest.mark.parametrize(
    ("min_insync", "replicas", "severity"),
    [("1", 1, "info"), ("2", 1, "fail"), ("2", 3, "info"), ("2", None, "info")],
)
def test_min_insync_replicas(min_insync, replicas, severity) -> None:
    findings = check_configs(KV, {"min.insync.replicas": min_insync}, replicas)
    assert _aspect(findings, "min.insync.replicas").severity == severity


@pytest.mark.parametrize(
    ("expected_partitions", "actual", "severity"),
    [(4, 4, "info"), (4, 2, "fail"), (4, 6, "warn"), (None, 3, "unknown")],
)
def test_partition_parity(expected_partitions, actual, severity) -> None:
    expected = expectation_for(Stores.persistent("counts"), expected_partitions)
    assert check_partitions(expected, actual).severity == severity


@pytest.mark.parametrize(
    ("severities", "verdict"),
    [
        ([], "ok"),
        (["info", "unknown"], "ok"),
        (["info", "warn"], "warn"),
        (["warn", "fail", "unknown"], "fail"),
    ],
)
def test_verdict(severities, verdict) -> None:
    assert verdict_of(Finding("x", s, "") for s in severities) == verdict


def test_only_safe_configs_are_fixed() -> None:
    # Cleaner configs are fixable too, but only planned where the broker compacts: see
    # test_audit_trim_and_forecast.py.
    findings = [
        Finding("retention.ms", "fail", "short", fix="100"),
        Finding("cleanup.policy", "warn", "compact only", fix="compact,delete"),
        Finding("min.insync.replicas", "fail", "too many", fix="1"),  # never changed
        Finding("partitions", "fail", "too few"),
    ]
    changes = planned_changes("t", findings, {"retention.ms": "5"})
    assert [(c.key, c.before, c.after) for c in changes] == [
        ("retention.ms", "5", "100"),
        ("cleanup.policy", None, "compact,delete"),
    ]
