"""A blue/green upgrade with proof: the steps the ``statekeeper_upgrade`` DAG runs with
``mode=shadow``, one task each (docs/changing-apps.md#a-shadow-upgrade-from-airflow).

1. :func:`migrate_beside`: the old version's committed state migrated into the new
   version's while the old one keeps running (``upgrade migrate``; the takeover is exact as
   long as no stateful task of the old version feeds a repartition topic);
2. the new version started beside it (the caller launches it: the same detached
   spark-submit supervision uses), taking over at the migration, on the same sources,
   writing its own outputs;
3. :func:`wait_aligned`: until both have processed the same input (``upgrade diff``'s
   alignment), bounded; what is behind is named when the time is up;
4. a restore drill of the new version (the caller: ``statekeeper.ops.drill``, with the
   spec's ``drill_model:``, a recomputation over the whole input);
5. :func:`diff_when_aligned`: states and outputs diffed (:mod:`statekeeper.upgrade.diff`);
6. :func:`check_proof` then ``cutover(shadow=True)``: only with the drill passed and no
   unexpected key, state or output; the old version stopped gracefully and its final state
   kept (its state root, changelogs, snapshots and checkpoint are never written by the new
   version) for ``upgrade rollback``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from statekeeper.app.spec import AppSpec
from statekeeper.migration.job import MigrationReport, prepare_migration, run_migration
from statekeeper.settings import StatekeeperSettings
from statekeeper.upgrade.cutover import UpgradeError
from statekeeper.upgrade.diff import DiffReport, diff_versions, queries_behind

Say = Callable[[str], None]
#: ``gone() -> why``: why the new version is not running (None while it runs).
Gone = Callable[[], str | None]

#: How often the alignment is checked.
POLL_S = 2.0


def migrate_beside(
    old_spec: AppSpec,
    new_spec: AppSpec,
    old_settings: StatekeeperSettings,
    new_settings: StatekeeperSettings,
    *,
    progress: Callable[[Any], None] | None = None,
) -> MigrationReport:
    """Step 1: migrate the old version's last commits into the new version's state (one
    stream task after the other, in this process), the old version left running. Refusals
    (:class:`~statekeeper.migration.MigrationRefused`) come before anything is written."""
    prepared = prepare_migration(old_spec, new_spec, old_settings, new_settings, snapshot=True)
    return run_migration(prepared, progress=progress)


def wait_aligned(
    old_spec: AppSpec,
    new_spec: AppSpec,
    old_settings: StatekeeperSettings,
    new_settings: StatekeeperSettings,
    *,
    timeout_s: float,
    gone: Gone | None = None,
    say: Say | None = None,
    poll_s: float = POLL_S,
) -> DiffReport:
    """Step 3: wait until both versions have processed the same input (each query at the
    sources' log ends, every stateful task committed to its inputs' ends); returns that
    state diff. The queries are checked first (no state read), the tasks once they are
    there. Raises :class:`UpgradeError` naming what is behind after ``timeout_s``, or at
    once when ``gone`` says the new version stopped."""
    from statekeeper.kafka.adapter import consumer_config
    from statekeeper.kafka.offsets import log_end_offsets

    say = say or (lambda _line: None)
    prepared = prepare_migration(
        old_spec, new_spec, old_settings, new_settings, snapshot=False, create_topics=False
    )
    tps = [(t, p) for t in sorted(prepared.partitions) for p in range(prepared.partitions[t])]
    conf = consumer_config(
        new_settings.bootstrap_servers, group_id=f"{new_settings.application_id}-diff"
    )
    deadline = time.monotonic() + timeout_s
    while True:
        stopped = gone() if gone is not None else None
        if stopped is not None:
            raise UpgradeError(
                f"{new_settings.application_id} stopped while waiting for it to catch up with "
                f"{old_settings.application_id}: {stopped}"
            )
        ends = log_end_offsets(conf, tps, new_settings.broker_timeout_s)
        behind = queries_behind(prepared, old_settings, new_settings, ends)
        if not behind:
            report = diff_versions(old_spec, new_spec, old_settings, new_settings, outputs=False)
            if report.aligned:
                return report
            behind = report.behind
        if time.monotonic() >= deadline:
            raise UpgradeError(
                f"{old_settings.application_id} and {new_settings.application_id} are not at "
                f"the same input after {timeout_s:.0f} s; behind: {'; '.join(behind[:8])}"
                + (f" (and {len(behind) - 8} more)" if len(behind) > 8 else "")
                + ". Pause the input (the comparison needs both at the sources' ends), or "
                "raise aligned_timeout_s"
            )
        say(f"not aligned yet: {behind[0]}" + (f" (+{len(behind) - 1})" if len(behind) > 1 else ""))
        time.sleep(poll_s)


def diff_when_aligned(
    old_spec: AppSpec,
    new_spec: AppSpec,
    old_settings: StatekeeperSettings,
    new_settings: StatekeeperSettings,
    *,
    timeout_s: float,
    poll_s: float = POLL_S,
) -> DiffReport:
    """Step 5: ``upgrade diff`` with the outputs; run again while the versions are not
    aligned (input arrived since step 3), up to ``timeout_s``. Returns the last report."""
    deadline = time.monotonic() + timeout_s
    while True:
        report = diff_versions(old_spec, new_spec, old_settings, new_settings)
        if report.aligned or time.monotonic() >= deadline:
            return report
        time.sleep(poll_s)


def check_proof(drill: dict[str, Any] | None, diff: dict[str, Any] | None) -> None:
    """Step 6's gate: the drill's record (``as_dict``) passed and the diff (``as_dict``) is
    aligned with no unexpected key, state or output; else :class:`UpgradeError` saying which
    proof is missing."""
    problems = []
    if not drill:
        problems.append("no drill of the new version")
    elif drill.get("status") != "pass":
        problems.append(f"the drill {drill.get('drill_id')} did not pass ({drill.get('status')})")
    if not diff:
        problems.append("no diff of the two versions")
    else:
        if not diff.get("aligned"):
            problems.append("the versions were not aligned at the diff")
        if diff.get("outputs") is None:
            problems.append("the outputs were not compared")
        if diff.get("unexpected"):
            problems.append(f"{diff['unexpected']} unexpected key(s) in the diff")
        if not diff.get("ok"):
            problems.append("the diff is not ok")
    if problems:
        raise UpgradeError("no cut-over: " + "; ".join(dict.fromkeys(problems)))
