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
version computes that the old one did not have). Then, once aligned, the outputs
(:mod:`statekeeper.upgrade.output_diff`): per output topic pair the latest value per key of
each version, equal / expected-different / unexpected; the sources' ends are read again
after, and input that arrived meanwhile makes the diff not aligned. An operator read: both
versions' states are read from their snapshots and changelogs into scratch copies, their
outputs with an assigned consumer; nothing is created, written, committed or locked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.app.spec import AppSpec
from statekeeper.migration.job import prepare_migration
from statekeeper.settings import StatekeeperSettings
from statekeeper.spark.checkpoint_log import last_committed_positions
from statekeeper.upgrade.output_diff import OutputDiffReport
from statekeeper.upgrade.verify import VerifyReport, verify_migration


@dataclass
class DiffReport:
    """``aligned`` (with what is behind otherwise), the per-key comparison of the states
    (``compared``) and of the outputs (``outputs``: None when not compared, because the
    versions are not aligned or it was not asked for)."""

    old_application_id: str
    new_application_id: str
    aligned: bool
    behind: list[str] = field(default_factory=list)
    compared: VerifyReport = field(default_factory=VerifyReport)
    outputs: OutputDiffReport | None = None
    #: Whether the outputs were asked for (``ok`` then needs them compared).
    with_outputs: bool = True

    @property
    def ok(self) -> bool:
        outputs_ok = not self.with_outputs or (self.outputs is not None and self.outputs.ok)
        return self.aligned and self.compared.ok and outputs_ok

    @property
    def unexpected(self) -> int:
        """Unexpected keys, state and outputs."""
        found = self.compared.totals()["unexpected"]
        return found + (0 if self.outputs is None else self.outputs.totals()["unexpected"])

    def as_dict(self) -> dict[str, Any]:
        return {
            "old_application_id": self.old_application_id,
            "new_application_id": self.new_application_id,
            "aligned": self.aligned,
            "behind": list(self.behind),
            "ok": self.ok,
            "unexpected": self.unexpected,
            "compared": self.compared.as_dict(),
            "outputs": None if self.outputs is None else self.outputs.as_dict(),
        }


def diff_versions(
    old_spec: AppSpec,
    new_spec: AppSpec,
    old_settings: StatekeeperSettings,
    new_settings: StatekeeperSettings,
    *,
    scratch_root: Path | None = None,
    outputs: bool = True,
) -> DiffReport:
    """Compare the two running versions' states and, once they are aligned, their outputs
    (``outputs``: False compares the states only) (module docstring)."""
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
    behind = queries_behind(prepared, old_settings, new_settings, ends)
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
    report = DiffReport(
        old_settings.application_id,
        new_settings.application_id,
        aligned=not behind,
        behind=behind,
        compared=compared,
        with_outputs=outputs,
    )
    if outputs and not behind:
        report.outputs = _diff_outputs(prepared, old_spec, new_spec)
        after = log_end_offsets(conf, tps, new_settings.broker_timeout_s)
        moved = [
            f"{t}[{p}] {ends[(t, p)]} -> {end}" for (t, p), end in sorted(after.items())
            if end != ends[(t, p)]
        ]  # fmt: skip
        if moved:
            report.aligned = False
            report.behind.append(
                "input arrived while the outputs were read (run the diff again): "
                + ", ".join(moved)
            )
    return report


def queries_behind(
    prepared: Any,
    old_settings: StatekeeperSettings,
    new_settings: StatekeeperSettings,
    ends: dict[tuple[str, int], int],
) -> list[str]:
    """Where either version's query (its last committed micro-batch, from its Spark
    checkpoint) is short of the sources' log ends ``ends``, one line each: the cheap half of
    the alignment (no state read)."""
    behind = []
    for version, settings in (("old", old_settings), ("new", new_settings)):
        at = last_committed_positions(settings.checkpoint_path())
        for topic in sorted(prepared.job.source_topics):
            for p in range(prepared.partitions.get(topic, 0)):
                if at.get((topic, p)) != ends[(topic, p)]:
                    behind.append(
                        f"the {version} version's query at {topic}[{p}] "
                        f"{at.get((topic, p), 'nothing committed')} of {ends[(topic, p)]}"
                    )
    return behind


def _diff_outputs(prepared: Any, old_spec: AppSpec, new_spec: AppSpec) -> OutputDiffReport:
    """The outputs of both versions compared (:mod:`statekeeper.upgrade.output_diff`)."""
    from statekeeper.kafka.topic_reader import read_topic
    from statekeeper.migration.store_plan import StoreAction
    from statekeeper.upgrade.output_diff import ValueRule, diff_outputs, output_pairs
    from statekeeper.versions.recorded import state_root
    from statekeeper.versions.takeover import read_takeover, takeover_path

    job = prepared.job
    old_app, new_app = job.old_settings.application_id, job.new_settings.application_id
    pairs, notes = output_pairs(
        old_spec, new_spec, job.old_topology, job.new_topology, old_app, new_app
    )
    rules = {}
    for pair in pairs:
        compares = []
        migration = None
        if pair.store is not None:
            step = job.step(pair.store)
            if step.action is StoreAction.MIGRATE:
                migration = job.migrations[pair.store]
            if (store_compare := new_spec.compare_function(pair.store)) is not None:
                compares.append(store_compare)
        if (own := new_spec.output_compare_function(pair.name)) is not None:
            compares.append(own)
        rules[pair.name] = ValueRule(migration, tuple(compares))
    takeover = read_takeover(takeover_path(state_root(job.new_settings.state_dir, new_app)))
    floor = None
    if takeover is not None and takeover.from_application_id == old_app:
        floor = takeover.batch_base
    else:
        notes.append(
            f"{new_app} did not take over from {old_app} (no takeover record): every key the "
            "old version wrote is compared"
        )
    bootstrap = job.new_settings.bootstrap_servers
    timeout = max(60.0, job.new_settings.broker_timeout_s)
    topics = diff_outputs(
        pairs,
        lambda topic: read_topic(bootstrap, topic, timeout_s=timeout),
        old_topology=job.old_topology,
        new_topology=job.new_topology,
        old_app=old_app,
        new_app=new_app,
        rules=rules,
        batch_floor=floor,
    )
    return OutputDiffReport(topics, notes)
