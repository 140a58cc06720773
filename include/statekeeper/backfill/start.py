"""Where a backfill's query starts: decided from what the app has done before.

:func:`read_history` gathers the facts (Spark's checkpoint, a recorded start, a migration's
takeover, committed state in task directories or changelogs); :func:`decide_start` (pure)
turns them and ``--from`` into a :class:`StartPlan`, or refuses:

- a fresh app (none of those) starts at ``--from``: the log start (``earliest``) or the
  first record at or after a timestamp; the offsets are recorded in the checkpoint
  (:mod:`statekeeper.app.recorded_start`) so a first micro-batch run again reads the same;
- an app whose query ran continues from its Spark checkpoint (a backfill run again after a
  crash does too); ``--from TIMESTAMP`` is refused unless the recorded start was chosen by
  the same timestamp;
- an app with state but no checkpoint of its query (deleted) starts a new query at the log
  start: its tasks skip what they committed. A migrated app starts where its takeover says.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.app.recorded_start import RecordedStart, read_start
from statekeeper.app.takeover_start import ADOPTED_FILE
from statekeeper.backfill.bounds import FromSpec
from statekeeper.errors import ConfigError
from statekeeper.spark.checkpoint_log import last_committed_batch
from statekeeper.state.task_id import TaskId
from statekeeper.versions.recorded import state_root
from statekeeper.versions.takeover import takeover_path

#: What chooses the offsets a query that never committed a batch starts at: the app's
#: ``starting_offsets`` setting (the query ran before, not as a backfill).
FROM_SETTING = "starting_offsets"


@dataclass(frozen=True)
class AppHistory:
    """What the app has done before, as far as where a backfill starts is concerned."""

    checkpoint: Path
    committed_batch: int | None = None  # Spark's newest committed micro-batch
    logged_batches: bool = False  # Spark's offset log holds a micro-batch
    recorded: RecordedStart | None = None
    takeover: bool = False  # a migration's takeover record
    committed_state: str | None = None  # why the app has state already


@dataclass(frozen=True)
class StartPlan:
    """``continues``: the query continues (from its checkpoint or a takeover); ``record``:
    what chooses the start offsets to record first (None: nothing to record); ``note``: one
    line for the report."""

    continues: bool
    record: str | None
    note: str


def decide_start(history: AppHistory, from_spec: FromSpec) -> StartPlan:
    """Where the backfill's query starts; a ConfigError when ``--from`` cannot apply."""
    ts = from_spec.timestamp_ms
    recorded = history.recorded
    at = (
        f"micro-batch {history.committed_batch}"
        if history.committed_batch is not None
        else "its first micro-batch, which never committed"
    )
    if recorded is not None:
        if ts is not None and recorded.chosen_by != from_spec.label:
            _refuse_timestamp(
                ts,
                f"its query started at offsets chosen by {recorded.chosen_by!r} (recorded in "
                f"{history.checkpoint})",
            )
        return StartPlan(True, None, f"continues the backfill from {recorded.chosen_by} at {at}")
    if history.logged_batches:
        _refuse_timestamp(ts, f"its Spark checkpoint {history.checkpoint} has micro-batches")
        record = FROM_SETTING if history.committed_batch is None else None
        return StartPlan(True, record, f"continues from its checkpoint at {at}")
    if history.takeover:
        _refuse_timestamp(ts, "it was migrated from an older version (takeover.json)")
        return StartPlan(True, None, "starts where the version it took over from stopped")
    if history.committed_state is not None:
        _refuse_timestamp(ts, history.committed_state)
        return StartPlan(
            False,
            "earliest",
            f"a new query at the log start on committed state ({history.committed_state}): "
            "its tasks skip what they committed",
        )
    return StartPlan(False, from_spec.label, f"a fresh app, from {from_spec.label}")


def _refuse_timestamp(ts: int | None, why: str) -> None:
    if ts is not None:
        raise ConfigError(
            f"--from {ts}: only a fresh app starts at a timestamp, and this one has run: "
            f"{why}; without --from the backfill continues from where it is"
        )


def read_history(
    settings: Any,
    topology: Any,
    checkpoint: Path,
    changelog_ends: dict[str, int] | None = None,
) -> AppHistory:
    """The facts :func:`decide_start` needs. ``changelog_ends``: records in each of the
    app's changelog topics (the caller reads them from the broker)."""
    offsets = checkpoint / "offsets"
    root = state_root(settings.state_dir, settings.application_id)
    return AppHistory(
        checkpoint=checkpoint,
        committed_batch=last_committed_batch(checkpoint),
        logged_batches=offsets.is_dir() and any(p.name.isdigit() for p in offsets.iterdir()),
        recorded=read_start(checkpoint),
        takeover=(checkpoint / ADOPTED_FILE).exists() or takeover_path(root).exists(),
        committed_state=_committed_state(root, topology, changelog_ends or {}),
    )


def _committed_state(root: Path, topology: Any, changelog_ends: dict[str, int]) -> str | None:
    stateful = {sub.id for sub in topology.subtopologies if topology.store_specs(sub.id)}
    if root.is_dir():
        for entry in sorted(root.iterdir()):
            tid = TaskId.try_parse(entry.name)
            stateful_task = tid is not None and tid.subtopology in stateful
            if stateful_task and (entry / ".checkpoint").exists():
                return f"task {entry.name} has committed state in {entry}"
    for topic, records in sorted(changelog_ends.items()):
        if records > 0:
            return f"its changelog {topic} holds records"
    return None
