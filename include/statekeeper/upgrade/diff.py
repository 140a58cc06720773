"""Diffing a shadow run: the old version still running, the new one started on state
migrated from it (it took over at the migration and has run beside it since, on the same
sources, writing its own outputs), both compared when they have processed the same input.

Aligned means both versions have processed every source record up to the log ends: each
query's last committed micro-batch ended at the sources' ends (its Spark checkpoint), and
every stateful task of both committed each of its inputs up to its end (the new version's
read-once carried topics aside). Only then are the states comparable; the diff says what
is behind otherwise (stop the input, or wait, and run it again).

Per key, as the migration verification (:mod:`statekeeper.upgrade.verify`): the old value
migrated against the new version's value, with the new spec's
``migrations.<store>.compare`` deciding which differences are expected (a field the new
version computes that the old one did not have). An operator read: both versions' states
are read from their snapshots and changelogs into scratch copies; nothing is created,
written or locked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.app.spec import AppSpec
from statekeeper.migration.job import prepare_migration
from statekeeper.settings import StatekeeperSettings
from statekeeper.spark.checkpoint_log import last_committed_positions
from statekeeper.upgrade.verify import VerifyReport, verify_migration


@dataclass
class DiffReport:
    """``aligned`` (with what is behind otherwise) and the per-key comparison."""

    old_application_id: str
    new_application_id: str
    aligned: bool
    behind: list[str] = field(default_factory=list)
    compared: VerifyReport = field(default_factory=VerifyReport)

    @property
    def ok(self) -> bool:
        return self.aligned and self.compared.ok

    def as_dict(self) -> dict[str, Any]:
        return {
            "old_application_id": self.old_application_id,
            "new_application_id": self.new_application_id,
            "aligned": self.aligned,
            "behind": list(self.behind),
            "ok": self.ok,
            "compared": self.compared.as_dict(),
        }


def diff_versions(
    old_spec: AppSpec,
    new_spec: AppSpec,
    old_settings: StatekeeperSettings,
    new_settings: StatekeeperSettings,
    *,
    scratch_root: Path | None = None,
) -> DiffReport:
    """Compare the two running versions' states (module docstring)."""
    from statekeeper.kafka.adapter import consumer_config
    from statekeeper.kafka.offsets import log_end_offsets

    prepared = prepare_migration(
        old_spec, new_spec, old_settings, new_settings, snapshot=False, create_topics=False
    )
    job = prepared.job
    topics = sorted(prepared.partitions)
    tps = [(t, p) for t in topics for p in range(prepared.partitions[t])]
    conf = consumer_config(
        new_settings.bootstrap_servers, group_id=f"{job.new_settings.application_id}-diff"
    )
    ends = log_end_offsets(conf, tps, new_settings.broker_timeout_s)
    behind = []
    for version, settings in (("old", old_settings), ("new", new_settings)):
        checkpoint = settings.checkpoint_path()
        at = last_committed_positions(checkpoint)
        for topic in sorted(job.source_topics):
            for p in range(prepared.partitions.get(topic, 0)):
                if at.get((topic, p)) != ends[(topic, p)]:
                    behind.append(
                        f"the {version} version's query at {topic}[{p}] "
                        f"{at.get((topic, p), 'nothing committed')} of {ends[(topic, p)]}"
                    )
    compare = {
        store: fn
        for store in new_spec.migrations
        if (fn := new_spec.compare_function(store)) is not None
    }
    compared = verify_migration(
        job,
        prepared.tasks,
        scratch_root=scratch_root,
        compare=compare,
        ends={f"{t}:{p}": e for (t, p), e in ends.items()},
    )
    behind += [f"task {t.task_id}: {t.positions}" for t in compared.tasks if not t.aligned]
    return DiffReport(
        old_settings.application_id,
        new_settings.application_id,
        aligned=not behind,
        behind=behind,
        compared=compared,
    )
