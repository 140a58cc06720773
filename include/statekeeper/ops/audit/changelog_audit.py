"""Audit every changelog topic of an app: configs, contents, restore forecast, verdict.

The app's topology gives its logged stores per subtopology and the source topics whose
partition count each changelog must match. Configs come from DescribeConfigs (absent =
broker default, unknown), partitions and replicas from DescribeTopics, contents from a
bounded read (:mod:`statekeeper.ops.audit.contents`) or a Spark batch read
(:mod:`statekeeper.ops.audit.spark_contents`). Where the broker compacts (its
:class:`~statekeeper.kafka.adapter.BrokerProfile`), cleaner configs are checked too
(:mod:`statekeeper.ops.audit.cleaner`). The forecast (:mod:`statekeeper.ops.audit.forecast`)
compares a full replay with the newest snapshot + tail, at the app's measured restore rate
when its status document has one. With ``fix`` the safe fixes
(:mod:`statekeeper.ops.audit.fixes`) are applied and the topics audited again; with ``trim``
the changelogs are trimmed below the kept snapshots' markers where the broker supports it
(:mod:`statekeeper.ops.audit.trim`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from statekeeper.changelog.records import changelog_topic
from statekeeper.kafka.adapter import BrokerProfile, consumer_config, detect_profile
from statekeeper.kafka.admin import (
    describe_topic,
    make_admin,
    partition_count,
    topic_configs,
    wait_for_broker,
)
from statekeeper.kafka.offsets import log_end_offsets, log_start_offsets
from statekeeper.ops.audit.cleaner import check_cleaner
from statekeeper.ops.audit.contents import (
    DEFAULT_MAX_RECORDS_PER_PARTITION,
    ChangelogContents,
    measure_changelog,
)
from statekeeper.ops.audit.expectations import (
    ChangelogExpectation,
    check_configs,
    check_partitions,
    expectation_for,
)
from statekeeper.ops.audit.findings import Finding, Verdict, verdict_of
from statekeeper.ops.audit.fixes import ConfigChange, apply_changes, planned_changes
from statekeeper.ops.audit.forecast import (
    DEFAULT_RESTORE_RATE,
    RestoreForecast,
    RestoreRate,
    forecast_topic,
    kept_markers,
    newest_markers,
)
from statekeeper.ops.audit.trim import TrimPlan, TrimSkip, apply_trim, plan_trim

__all__ = ["DEFAULT_RESTORE_RATE", "AuditReport", "TopicAudit", "audit_changelogs"]

#: Measures one topic's contents: (bootstrap, topic, partitions) -> ChangelogContents.
Measurer = Callable[[str, str, int], ChangelogContents]


@dataclass
class TopicAudit:
    """The audit of one changelog topic."""

    topic: str
    store: str
    subtopology: int
    exists: bool
    configs: dict[str, str | None] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    contents: ChangelogContents | None = None
    full_restore_seconds: float | None = None
    changes: list[ConfigChange] = field(default_factory=list)
    forecast: RestoreForecast | None = None

    @property
    def verdict(self) -> Verdict:
        return verdict_of(self.findings)

    def reasons(self) -> list[str]:
        """The findings that lowered the verdict, as ``aspect: message``."""
        return [f"{f.aspect}: {f.message}" for f in self.findings if f.severity in ("warn", "fail")]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for ``--json``)."""
        contents = None
        if self.contents is not None:
            contents = {
                **asdict(self.contents),
                "tombstone_share": round(self.contents.tombstone_share, 4),
                "superseded_share": round(self.contents.superseded_share, 4),
            }
        return {
            "topic": self.topic,
            "store": self.store,
            "subtopology": self.subtopology,
            "exists": self.exists,
            "verdict": self.verdict,
            "reasons": self.reasons(),
            "configs": self.configs,
            "findings": [asdict(f) for f in self.findings],
            "contents": contents,
            "full_restore_seconds": self.full_restore_seconds,
            "forecast": self.forecast.to_dict() if self.forecast else None,
            "changes": [asdict(c) for c in self.changes],
        }


@dataclass
class AuditReport:
    """Every changelog topic of one app; ``applied`` lists the changes ``fix`` made."""

    application_id: str
    restore_rate: float
    topics: list[TopicAudit]
    applied: list[ConfigChange] = field(default_factory=list)
    rate: RestoreRate | None = None
    broker: str | None = None  # the broker profile's name
    measured_with: str = "python"  # or "spark"
    snapshots_note: str | None = None  # why no snapshot was considered, when none was
    trim: TrimPlan | None = None
    trimmed: dict[str, int] = field(default_factory=dict)  # "topic[p]" -> new log start

    @property
    def verdict(self) -> Verdict:
        return verdict_of(f for t in self.topics for f in t.findings)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for ``--json``)."""
        return {
            "application_id": self.application_id,
            "verdict": self.verdict,
            "broker": self.broker,
            "measured_with": self.measured_with,
            "restore_rate_records_per_s": self.restore_rate,
            "restore_rate_is_default": self.rate is None or self.rate.source == "default",
            "restore_rate_source": asdict(self.rate) if self.rate else None,
            "snapshots_note": self.snapshots_note,
            "topics": [t.to_dict() for t in self.topics],
            "applied": [asdict(c) for c in self.applied],
            "trim": self.trim.to_dict() if self.trim else None,
            "trimmed": self.trimmed,
        }


def audit_changelogs(
    topology: Any,
    application_id: str,
    bootstrap: str,
    *,
    fix: bool = False,
    measure: bool = True,
    restore_rate: float | RestoreRate = DEFAULT_RESTORE_RATE,
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION,
    timeout_s: float = 30.0,
    profile: BrokerProfile | None = None,
    measurer: Measurer | None = None,
    snapshots: Any = None,
    snapshots_note: str | None = None,
    trim: bool = False,
) -> AuditReport:
    """Audit the changelogs of ``topology`` run as ``application_id`` on ``bootstrap``.

    ``profile``: the broker's (detected when None). ``measurer``: how contents are read
    (default: the bounded plain-Python read; ``--spark`` passes a Spark batch read).
    ``snapshots``: the app's :class:`~statekeeper.snapshots.storage.SnapshotStorage` (None:
    forecast full replays only; ``snapshots_note`` says why). ``restore_rate``: records/s
    or a :class:`RestoreRate` saying where the figure comes from.

    Raises BrokerUnavailableError when the broker does not answer. With ``fix``, applies the
    safe fixes, then audits again: the report shows the state after the fixes, with
    ``applied`` (and each topic's ``changes``) saying what was changed. With ``trim``, plans
    the trim below the kept snapshots' markers and runs it where the broker supports
    DeleteRecords (``report.trim.refused`` says why not elsewhere; nothing is called then).
    """
    rate = (
        restore_rate
        if isinstance(restore_rate, RestoreRate)
        else RestoreRate(
            restore_rate,
            "default" if restore_rate == DEFAULT_RESTORE_RATE else "given",
            "docs/benchmarks.md" if restore_rate == DEFAULT_RESTORE_RATE else "caller",
        )
    )
    if rate.records_per_s <= 0:
        raise ValueError(f"restore rate must be > 0 records/s, got {rate.records_per_s}")
    wait_for_broker(bootstrap, timeout_s=timeout_s)
    admin = make_admin(bootstrap)
    profile = profile or detect_profile(admin, timeout_s=timeout_s)
    manifests = _manifests(snapshots)
    if measurer is None:

        def measurer(bootstrap: str, topic: str, partitions: int) -> ChangelogContents:
            return measure_changelog(
                bootstrap, topic, partitions,
                max_records_per_partition=max_records_per_partition, timeout_s=timeout_s,
            )  # fmt: skip

        measured_with = "python"
    else:
        measured_with = "spark"
    context = _Context(admin, bootstrap, profile, measurer if measure else None, rate, manifests,
                       timeout_s)  # fmt: skip
    audits = _audit_once(context, topology, application_id)
    report = AuditReport(
        application_id, rate.records_per_s, audits, rate=rate, broker=profile.name,
        measured_with=measured_with, snapshots_note=snapshots_note,
    )  # fmt: skip
    if fix:
        changes = [c for a in audits for c in planned_changes(a.topic, a.findings, a.configs)]
        apply_changes(admin, changes, timeout_s)
        report.topics = _audit_once(context, topology, application_id)
        for audit in report.topics:
            audit.changes = [c for c in changes if c.topic == audit.topic]
        report.applied = changes
    if trim:
        report.trim = _plan_trim(context, report.topics, snapshots, _replay_only(topology))
        if report.trim.refused is None and report.trim.actions:
            low = apply_trim(admin, profile, report.trim, timeout_s)
            report.trimmed = {f"{t}[{p}]": offset for (t, p), offset in sorted(low.items())}
    return report


@dataclass
class _Context:
    admin: Any
    bootstrap: str
    profile: BrokerProfile
    measurer: Measurer | None
    rate: RestoreRate
    manifests: list[Any]
    timeout_s: float


def _manifests(snapshots: Any) -> list[Any]:
    if snapshots is None:
        return []
    from statekeeper.snapshots.catalog import list_snapshots

    return list_snapshots(snapshots)


def _offsets(context: _Context, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    tps = [(topic, p) for p in range(partitions)]
    conf = consumer_config(context.bootstrap)
    starts = log_start_offsets(conf, tps, context.timeout_s)
    ends = log_end_offsets(conf, tps, context.timeout_s)
    return {p: (starts[(topic, p)], ends[(topic, p)]) for _, p in tps}


def _audit_once(context: _Context, topology: Any, application_id: str) -> list[TopicAudit]:
    audits = []
    admin, timeout_s = context.admin, context.timeout_s
    for sub in topology.subtopologies:
        specs = [s for s in topology.store_specs(sub.id) if s.logging_enabled]
        if not specs:
            continue
        counts = [
            partition_count(admin, t, timeout_s)
            for t in topology.subtopology_topics(application_id, sub.id)
        ]
        known = [c for c in counts if c is not None]
        source_partitions = max(known) if known else None
        for spec in specs:
            expected = expectation_for(spec, source_partitions)
            topic = changelog_topic(application_id, spec.name)
            audit = _audit_topic(admin, topic, expected, sub.id, timeout_s)
            if audit.exists:
                partitions = partition_count(admin, topic, timeout_s) or 0
                if context.measurer is not None:
                    audit.contents = context.measurer(context.bootstrap, topic, partitions)
                offsets = _offsets(context, topic, partitions)
                audit.forecast = forecast_topic(
                    topic,
                    {p: start for p, (start, _) in offsets.items()},
                    {p: end for p, (_, end) in offsets.items()},
                    context.manifests,
                    context.rate,
                    audit.contents.records if audit.contents else None,
                )
                audit.full_restore_seconds = audit.forecast.full_restore_seconds
                audit.findings.extend(
                    check_cleaner(
                        audit.configs,
                        compacts=context.profile.compacts,
                        superseded_share=audit.contents.superseded_share
                        if audit.contents
                        else None,
                        retention_ms=expected.wanted_retention_ms,
                    )
                )
            audits.append(audit)
    if audits and not any(a.exists for a in audits):
        # A fresh platform: the app has not started yet, which is no warning.
        for audit in audits:
            audit.findings = [
                Finding(
                    "topic", "info", "not created yet (the app creates it when it first starts)"
                )
            ]
    return audits


def _replay_only(topology: Any) -> set[str]:
    """Stores that always restore by a full replay (in-memory, LRU): never trimmed."""
    return {
        spec.name
        for sub in topology.subtopologies
        for spec in topology.store_specs(sub.id)
        if not spec.persistent
    }


def _plan_trim(
    context: _Context, audits: list[TopicAudit], snapshots: Any, replay_only: set[str]
) -> TrimPlan:
    """The trim plan of every existing changelog (see :mod:`statekeeper.ops.audit.trim`);
    changelogs of ``replay_only`` stores are skipped."""
    offsets = {
        (a.topic, p.partition): (p.log_start, p.log_end)
        for a in audits
        if a.forecast is not None and a.store not in replay_only
        for p in a.forecast.partitions
    }
    verified: dict[tuple[str, int], bool] = {}
    if context.profile.delete_records and snapshots is not None:
        from statekeeper.snapshots.catalog import verify_snapshot

        for topic in {t for t, _ in offsets}:
            for partition, manifest in newest_markers(context.manifests, topic).items():
                verified[(topic, partition)] = verify_snapshot(snapshots, manifest).ok
    plan = plan_trim(context.profile, offsets, kept_markers(context.manifests), verified)
    if plan.refused is None:
        plan.skipped += [
            TrimSkip(a.topic, p.partition, "in-memory/LRU store: it always restores by full replay")
            for a in audits
            if a.forecast is not None and a.store in replay_only
            for p in a.forecast.partitions
        ]
    return plan


def _audit_topic(
    admin: Any, topic: str, expected: ChangelogExpectation, subtopology: int, timeout_s: float
) -> TopicAudit:
    description = describe_topic(admin, topic, timeout_s)
    if description is None:
        return TopicAudit(
            topic,
            expected.store,
            subtopology,
            exists=False,
            findings=[
                Finding(
                    "topic",
                    "warn",
                    "missing while other changelogs of the app exist (deleted? the app "
                    "creates it when it starts); its store cannot be restored from a "
                    "changelog until then",
                )
            ],
        )
    partitions = description.partitions
    replicas = min((len(p.replicas) for p in partitions), default=None) or None
    configs = topic_configs(admin, topic, timeout_s)
    findings = [check_partitions(expected, len(partitions))]
    findings.extend(check_configs(expected, configs, replicas))
    return TopicAudit(topic, expected.store, subtopology, True, configs, findings)
