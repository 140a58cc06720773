"""Trim changelogs below the snapshots' markers with DeleteRecords (``audit --trim``).

Records below a snapshot's commit marker are only needed by a full replay; a restore from
that snapshot starts at the marker. A partition is trimmed to the OLDEST kept snapshot's
marker of that partition, so every kept snapshot stays restorable (a restore falls back to
older snapshots), and only when the newest snapshot of the partition verified. A partition
without a snapshot is never trimmed: a full replay is its only restore.

After a trim a full replay no longer rebuilds the store (the records below the marker are
gone): snapshots are then the only way back for keys last written below it.

Only where the broker supports DeleteRecords (:attr:`BrokerProfile.delete_records`); on a
broker that does not (the embedded one, whose broker thread panics on it) the plan is
refused and nothing is called.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from statekeeper.errors import ChangelogTopicError
from statekeeper.kafka.adapter import BrokerProfile

TP = tuple[str, int]


@dataclass(frozen=True)
class TrimAction:
    """Delete the records of one partition below ``trim_to`` (a kept snapshot's marker)."""

    topic: str
    partition: int
    log_start: int
    trim_to: int

    @property
    def records(self) -> int:
        return self.trim_to - self.log_start


@dataclass(frozen=True)
class TrimSkip:
    """A partition left as it is, and why."""

    topic: str
    partition: int
    reason: str


@dataclass
class TrimPlan:
    """What ``--trim`` would do; ``refused`` (a reason) means nothing at all is trimmed."""

    actions: list[TrimAction] = field(default_factory=list)
    skipped: list[TrimSkip] = field(default_factory=list)
    refused: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "refused": self.refused,
            "actions": [{**asdict(a), "records": a.records} for a in self.actions],
            "skipped": [asdict(s) for s in self.skipped],
        }


def plan_trim(
    profile: BrokerProfile,
    offsets: Mapping[TP, tuple[int, int]],
    markers: Mapping[TP, list[int]],
    verified: Mapping[TP, bool],
) -> TrimPlan:
    """Plan the trim of ``offsets`` (per changelog partition: log start, log end).

    ``markers``: every kept snapshot's marker offset per partition; ``verified``: whether
    the newest snapshot of the partition passed verification.
    """
    if not profile.delete_records:
        return TrimPlan(
            refused=f"the {profile.name} broker does not support DeleteRecords: nothing "
            "trimmed (its changelogs are bounded by snapshots only; restores already start "
            "at the newest snapshot's marker)"
        )
    plan = TrimPlan()
    for tp in sorted(offsets):
        topic, partition = tp
        log_start, log_end = offsets[tp]
        kept = [m for m in markers.get(tp, []) if m >= 0]
        if not kept:
            plan.skipped.append(
                TrimSkip(topic, partition, "no snapshot with a marker: a full replay is its "
                         "only restore")
            )  # fmt: skip
            continue
        if not verified.get(tp, False):
            plan.skipped.append(
                TrimSkip(topic, partition, "the newest snapshot did not verify: keeping the "
                         "records a full replay needs")
            )  # fmt: skip
            continue
        trim_to = min(min(kept), log_end)
        if trim_to <= log_start:
            plan.skipped.append(
                TrimSkip(topic, partition, f"nothing below the oldest kept snapshot's marker "
                         f"({trim_to}; log starts at {log_start})")
            )  # fmt: skip
            continue
        plan.actions.append(TrimAction(topic, partition, log_start, trim_to))
    return plan


def apply_trim(
    admin: Any, profile: BrokerProfile, plan: TrimPlan, timeout_s: float = 30.0
) -> dict[TP, int]:
    """Run the plan's DeleteRecords (one request); returns each partition's new log start.

    Raises ChangelogTopicError when the plan was refused or the broker rejects a partition.
    """
    if plan.refused is not None or not profile.delete_records:
        raise ChangelogTopicError(plan.refused or f"the {profile.name} broker cannot trim")
    if not plan.actions:
        return {}
    from confluent_kafka import KafkaException, TopicPartition

    requests = [TopicPartition(a.topic, a.partition, a.trim_to) for a in plan.actions]
    futures = admin.delete_records(requests, request_timeout=timeout_s, operation_timeout=timeout_s)
    low: dict[TP, int] = {}
    for tp, future in futures.items():
        try:
            deleted = future.result(timeout=timeout_s)
        except KafkaException as exc:
            raise ChangelogTopicError(
                f"cannot trim {tp.topic}[{tp.partition}] below {tp.offset}: {exc.args[0].str()}"
            ) from exc
        low[(tp.topic, tp.partition)] = deleted.low_watermark
    return low
