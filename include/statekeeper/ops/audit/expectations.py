"""What a store's changelog topic should look like, and how a topic's configs compare.

Pure logic (no broker): given a store spec, the source partition count and the configs the
broker reported, return findings. A config the broker does not report is "broker default,
unknown" (the embedded broker only reports the keys set at creation), never a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from statekeeper.ops.audit.findings import Finding
from statekeeper.stores.builders import WINDOW_CHANGELOG_EXTRA_RETENTION_MS, StoreSpec

#: A dirty ratio at or above this lets the log cleaner leave most of the log uncompacted.
HIGH_DIRTY_RATIO = 0.9


@dataclass(frozen=True)
class ChangelogExpectation:
    """What statekeeper expects of one store's changelog topic.

    Attributes:
        store: the store's name.
        window: the store is a window store (compact,delete with a retention).
        partitions: the source partition count of the store's subtopology (None: unknown,
            the source topics do not exist).
        min_retention_ms: window stores: below this restores lose windows the live store
            still has (the store's retention, itself >= size + grace).
        windows_floor_ms: window stores: size + grace, named in the failure message.
        wanted_retention_ms: window stores: what statekeeper creates (retention + margin).
    """

    store: str
    window: bool
    partitions: int | None
    min_retention_ms: int | None = None
    windows_floor_ms: int | None = None
    wanted_retention_ms: int | None = None

    @property
    def cleanup_policy(self) -> str:
        return "compact,delete" if self.window else "compact"


def expectation_for(
    spec: StoreSpec,
    source_partitions: int | None,
    margin_ms: int = WINDOW_CHANGELOG_EXTRA_RETENTION_MS,
) -> ChangelogExpectation:
    """The expectation for ``spec``'s changelog (``margin_ms``: extra window retention)."""
    if spec.kind != "window":
        return ChangelogExpectation(spec.name, False, source_partitions)
    assert spec.retention_ms is not None and spec.window_size_ms is not None
    return ChangelogExpectation(
        spec.name,
        True,
        source_partitions,
        min_retention_ms=spec.retention_ms,
        windows_floor_ms=spec.window_size_ms + spec.grace_ms,
        wanted_retention_ms=spec.retention_ms + margin_ms,
    )


def check_partitions(expected: ChangelogExpectation, actual: int) -> Finding:
    """Changelog partitions must equal the source's: fewer leaves tasks without a changelog."""
    if expected.partitions is None:
        return Finding(
            "partitions", "unknown", f"{actual} partitions; source partition count unknown"
        )
    if actual < expected.partitions:
        return Finding(
            "partitions",
            "fail",
            f"{actual} partitions but the source has {expected.partitions}: tasks "
            f"{actual}..{expected.partitions - 1} have no changelog partition",
        )
    if actual > expected.partitions:
        return Finding(
            "partitions",
            "warn",
            f"{actual} partitions but the source has {expected.partitions}: the extra "
            "partitions are never written",
        )
    return Finding("partitions", "info", f"{actual} partitions, as the source")


def check_configs(
    expected: ChangelogExpectation,
    configs: Mapping[str, str | None],
    replicas: int | None = None,
) -> list[Finding]:
    """Findings for ``configs`` (what describe_configs reported; absent = broker default)."""
    findings = [_cleanup_policy(expected, configs.get("cleanup.policy"))]
    if expected.window:
        findings.append(_retention(expected, configs.get("retention.ms")))
        findings.extend(_segment(configs))
    findings.extend(_dirty_ratio(configs.get("min.cleanable.dirty.ratio")))
    findings.extend(_replication(configs.get("min.insync.replicas"), replicas))
    return findings


def _policies(value: str) -> set[str]:
    return {p.strip().lower() for p in value.split(",") if p.strip()}


def _cleanup_policy(expected: ChangelogExpectation, value: str | None) -> Finding:
    wanted = expected.cleanup_policy
    if value is None:
        return Finding(
            "cleanup.policy", "unknown", f"not reported (broker default); expected {wanted}"
        )
    policies = _policies(value)
    if policies == _policies(wanted):
        return Finding("cleanup.policy", "info", f"{value}, as expected")
    if "compact" not in policies:
        # Time-based deletion alone drops the only copy of keys not written recently.
        return Finding(
            "cleanup.policy",
            "fail",
            f"{value}: without compaction old keys are deleted by time and a restore loses "
            f"them; expected {wanted}",
            fix=wanted,
        )
    if expected.window:
        return Finding(
            "cleanup.policy",
            "warn",
            f"{value}: expired windows are never deleted, the changelog grows without bound; "
            f"expected {wanted}",
            fix=wanted,
        )
    return Finding(
        "cleanup.policy",
        "fail",
        f"{value}: deletion by time drops keys still in the store; expected {wanted}",
        fix=wanted,
    )


def _retention(expected: ChangelogExpectation, value: str | None) -> Finding:
    assert expected.min_retention_ms is not None and expected.wanted_retention_ms is not None
    wanted = expected.wanted_retention_ms
    if value is None:
        return Finding(
            "retention.ms",
            "unknown",
            f"not reported (broker default); expected >= {wanted} ms",
        )
    try:
        retention = int(value)
    except ValueError:
        return Finding("retention.ms", "fail", f"{value!r} is not a number", fix=str(wanted))
    if retention < 0:
        return Finding("retention.ms", "info", f"{retention}: no time-based deletion")
    floor = expected.windows_floor_ms or 0
    if retention < floor:
        return Finding(
            "retention.ms",
            "fail",
            f"{retention} ms is shorter than window size + grace ({floor} ms): a restore "
            f"loses windows that still accept records; expected >= {wanted} ms",
            fix=str(wanted),
        )
    if retention < expected.min_retention_ms:
        return Finding(
            "retention.ms",
            "fail",
            f"{retention} ms is shorter than the store's retention "
            f"({expected.min_retention_ms} ms): a restore loses windows the store keeps; "
            f"expected >= {wanted} ms",
            fix=str(wanted),
        )
    if retention < wanted:
        return Finding(
            "retention.ms",
            "warn",
            f"{retention} ms leaves less than the margin over the store's retention "
            f"({expected.min_retention_ms} ms): a restore after a long outage may miss "
            f"windows; expected >= {wanted} ms",
            fix=str(wanted),
        )
    return Finding("retention.ms", "info", f"{retention} ms >= {wanted} ms")


def _segment(configs: Mapping[str, str | None]) -> list[Finding]:
    findings = []
    for key in ("segment.ms", "segment.bytes"):
        value = configs.get(key)
        if value is not None:
            findings.append(Finding(key, "info", f"{value}"))
    segment_ms, retention_ms = configs.get("segment.ms"), configs.get("retention.ms")
    both_numbers = (segment_ms or "").isdigit() and (retention_ms or "").isdigit()
    if both_numbers and int(segment_ms or 0) > int(retention_ms or 0):
        # Only closed segments are deleted: windows live until the segment rolls.
        findings.append(
            Finding(
                "segment.ms",
                "warn",
                f"{segment_ms} ms > retention.ms {retention_ms}: expired windows stay "
                "until the segment rolls",
            )
        )
    return findings


def _dirty_ratio(value: str | None) -> list[Finding]:
    if value is None:
        return []
    try:
        ratio = float(value)
    except ValueError:
        return [Finding("min.cleanable.dirty.ratio", "warn", f"{value!r} is not a number")]
    if ratio >= HIGH_DIRTY_RATIO:
        return [
            Finding(
                "min.cleanable.dirty.ratio",
                "warn",
                f"{value}: the cleaner waits until most of the log is dirty; restores replay "
                "up to that much more",
            )
        ]
    return [Finding("min.cleanable.dirty.ratio", "info", value)]


def _replication(min_insync: str | None, replicas: int | None) -> list[Finding]:
    findings = []
    if replicas is not None:
        findings.append(Finding("replication", "info", f"{replicas} replica(s) per partition"))
    if min_insync is None:
        return findings
    if replicas is not None and min_insync.isdigit() and int(min_insync) > replicas:
        findings.append(
            Finding(
                "min.insync.replicas",
                "fail",
                f"{min_insync} > {replicas} replicas: acks=all writes to the changelog fail",
            )
        )
    else:
        findings.append(Finding("min.insync.replicas", "info", min_insync))
    return findings
