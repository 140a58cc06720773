"""A restore-time budget for an app: when the audit's forecast exceeds it, snapshot the app.

The forecast compared with the budget is the restore an app would run now: each changelog
partition from its newest snapshot's marker (the whole log where it has none), at the
forecast's rate, summed over the app's changelogs (a serial bound: tasks restore in
parallel on a cluster). Full replay is not the figure: a snapshot does not shorten it, so a
budget on it would snapshot at every audit; a fresh snapshot cuts the tail to nothing, so
the next audit finds the app within budget. The snapshot is taken as ``statekeeper snapshot
create`` takes it (:mod:`statekeeper.ops.snapshot_app`): a running app through its status
endpoint, at its next commit; a stopped one from its local state.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from statekeeper.ops.audit.changelog_audit import AuditReport
from statekeeper.settings import StatekeeperSettings


@dataclass
class BudgetCheck:
    """The app's forecast against its budget, and the snapshot taken when over it."""

    budget_s: float | None
    forecast_restore_s: float  # newest snapshot + tail (full replay without a snapshot)
    full_replay_s: float
    topics: dict[str, float] = field(default_factory=dict)  # topic -> its forecast seconds
    #: set when a snapshot was taken: running, request_id (running app), snapshot_ids
    snapshot: dict[str, Any] | None = None

    @property
    def over_budget(self) -> bool:
        return self.budget_s is not None and self.forecast_restore_s > self.budget_s

    def to_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "forecast_restore_s": round(self.forecast_restore_s, 6),
            "full_replay_s": round(self.full_replay_s, 6),
            "topics": {t: round(s, 6) for t, s in self.topics.items()},
            "over_budget": self.over_budget,
        }


def check_budget(report: AuditReport, budget_s: float | None) -> BudgetCheck:
    """The app's forecast restore time (from ``report``'s per-topic forecasts) vs
    ``budget_s`` (None: no budget, never over)."""
    if budget_s is not None and budget_s <= 0:
        raise ValueError(f"restore time budget must be > 0 seconds, got {budget_s}")
    topics = {
        t.topic: t.forecast.snapshot_tail_seconds for t in report.topics if t.forecast is not None
    }
    full = sum(t.forecast.full_restore_seconds for t in report.topics if t.forecast is not None)
    return BudgetCheck(budget_s, sum(topics.values()), full, topics)


def enforce_budget(
    report: AuditReport,
    budget_s: float | None,
    settings: StatekeeperSettings,
    topology: Any,
    storage: Any,
    timeout_s: float = 300.0,
) -> BudgetCheck:
    """:func:`check_budget`, then :func:`statekeeper.ops.snapshot_app.snapshot_now` when the
    app is over it (``storage``: a callable returning the app's SnapshotStorage, made where
    missing; it is only called when a snapshot is taken)."""
    check = check_budget(report, budget_s)
    if check.over_budget:
        from statekeeper.ops.snapshot_app import snapshot_now

        check.snapshot = snapshot_now(settings, topology, storage(), timeout_s)
    return check
