"""Audit every changelog topic of an app: configs, contents, restore forecast, verdict.

The app's topology gives its logged stores per subtopology and the source topics whose
partition count each changelog must match. Configs come from DescribeConfigs (absent =
broker default, unknown), partitions and replicas from DescribeTopics, contents from a
bounded read (:mod:`statekeeper.ops.audit.contents`). With ``fix`` the safe fixes
(:mod:`statekeeper.ops.audit.fixes`) are applied and the topics audited again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from statekeeper.changelog.records import changelog_topic
from statekeeper.kafka.admin import (
    describe_topic,
    make_admin,
    partition_count,
    topic_configs,
    wait_for_broker,
)
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

#: Full-restore rate assumed for the forecast, records/s: the measured full restore of
#: docs/benchmarks.md (1M records, 4 partitions, embedded broker, 2 cores: 570-680k/s)
#: rounded down. A default, not a measurement of the audited cluster: pass your own.
DEFAULT_RESTORE_RATE = 550_000.0


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
            "changes": [asdict(c) for c in self.changes],
        }


@dataclass
class AuditReport:
    """Every changelog topic of one app; ``applied`` lists the changes ``fix`` made."""

    application_id: str
    restore_rate: float
    topics: list[TopicAudit]
    applied: list[ConfigChange] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        return verdict_of(f for t in self.topics for f in t.findings)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for ``--json``)."""
        return {
            "application_id": self.application_id,
            "verdict": self.verdict,
            "restore_rate_records_per_s": self.restore_rate,
            "restore_rate_is_default": self.restore_rate == DEFAULT_RESTORE_RATE,
            "topics": [t.to_dict() for t in self.topics],
            "applied": [asdict(c) for c in self.applied],
        }


def audit_changelogs(
    topology: Any,
    application_id: str,
    bootstrap: str,
    *,
    fix: bool = False,
    measure: bool = True,
    restore_rate: float = DEFAULT_RESTORE_RATE,
    max_records_per_partition: int = DEFAULT_MAX_RECORDS_PER_PARTITION,
    timeout_s: float = 30.0,
) -> AuditReport:
    """Audit the changelogs of ``topology`` run as ``application_id`` on ``bootstrap``.

    Raises BrokerUnavailableError when the broker does not answer. With ``fix``, applies the
    safe fixes, then audits again: the report shows the state after the fixes, with
    ``applied`` (and each topic's ``changes``) saying what was changed.
    """
    if restore_rate <= 0:
        raise ValueError(f"restore rate must be > 0 records/s, got {restore_rate}")
    wait_for_broker(bootstrap, timeout_s=timeout_s)
    admin = make_admin(bootstrap)
    audits = _audit_once(
        admin, bootstrap, topology, application_id, measure,
        restore_rate, max_records_per_partition, timeout_s,
    )  # fmt: skip
    if not fix:
        return AuditReport(application_id, restore_rate, audits)
    changes = [c for a in audits for c in planned_changes(a.topic, a.findings, a.configs)]
    apply_changes(admin, changes, timeout_s)
    after = _audit_once(
        admin, bootstrap, topology, application_id, measure,
        restore_rate, max_records_per_partition, timeout_s,
    )  # fmt: skip
    for audit in after:
        audit.changes = [c for c in changes if c.topic == audit.topic]
    return AuditReport(application_id, restore_rate, after, changes)


def _audit_once(
    admin: Any,
    bootstrap: str,
    topology: Any,
    application_id: str,
    measure: bool,
    restore_rate: float,
    max_records_per_partition: int,
    timeout_s: float,
) -> list[TopicAudit]:
    audits = []
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
            if measure and audit.exists:
                partitions = partition_count(admin, topic, timeout_s) or 0
                audit.contents = measure_changelog(
                    bootstrap,
                    topic,
                    partitions,
                    max_records_per_partition=max_records_per_partition,
                    timeout_s=timeout_s,
                )
                audit.full_restore_seconds = audit.contents.records / restore_rate
            audits.append(audit)
    return audits


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
                    "does not exist yet (the app creates it when it starts); its store "
                    "cannot be restored from a changelog until then",
                )
            ],
        )
    partitions = description.partitions
    replicas = min((len(p.replicas) for p in partitions), default=None) or None
    configs = topic_configs(admin, topic, timeout_s)
    findings = [check_partitions(expected, len(partitions))]
    findings.extend(check_configs(expected, configs, replicas))
    return TopicAudit(topic, expected.store, subtopology, True, configs, findings)
