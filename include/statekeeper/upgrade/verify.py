"""Proving a migration, and diffing a shadow run: the new version's state, read back from
its own changelogs and snapshots, against the old version's state with the migration
applied again.

Per task, both versions are read the way a restore reads them (read-only, in scratch
directories: :func:`statekeeper.migration.old_state.old_task_state`), at their last commits,
which a migration aligns: the same batch id and source offsets. Per store, every key is

- ``equal``: the new value is the old one (a copied store, or a migration that kept it);
- ``expected-different``: the new value differs from the old one as the migration says;
- ``unexpected``: missing, extra, or another value than the migration gives (listed, a few
  per store), unless the store's ``compare`` function (the new spec's
  ``migrations.<store>.compare``) says the difference is expected.

Right after a migration both commits sit at the same batch id and source offsets
(``aligned``). A shadow run (:mod:`statekeeper.upgrade.diff`) compares two versions that
both ran on: there a task is aligned when both versions committed every input partition up
to its log end (``ends``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.migration.functions import StoreCounts, migrated_entries
from statekeeper.migration.old_state import committed_batch, old_task_state
from statekeeper.migration.store_plan import StoreAction
from statekeeper.migration.task import MigrationJob, carried_specs, store_entries
from statekeeper.state.task_id import TaskId
from statekeeper.versions.fingerprint import STORE_PREFIX as TASK_STATE_PREFIX

#: Unexpected keys listed per store (all are counted).
EXAMPLES = 5


@dataclass
class StoreDiff:
    """One store of one task: counts per verdict and a few unexpected keys."""

    equal: int = 0
    expected_different: int = 0
    unexpected: int = 0
    examples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "equal": self.equal,
            "expected_different": self.expected_different,
            "unexpected": self.unexpected,
            "examples": list(self.examples),
        }


@dataclass
class TaskDiff:
    """One task: per store its diff, and whether both commits sit at the same batch id and
    source offsets (``aligned``; ``positions`` says where when they do not)."""

    task_id: str
    aligned: bool
    positions: str
    stores: dict[str, StoreDiff] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "task": self.task_id,
            "aligned": self.aligned,
            "positions": self.positions,
            "stores": {name: d.as_dict() for name, d in sorted(self.stores.items())},
        }


@dataclass
class VerifyReport:
    """Every task's diff; ``ok`` when every task is aligned and no key is unexpected."""

    tasks: list[TaskDiff] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(
            t.aligned and all(d.unexpected == 0 for d in t.stores.values()) for t in self.tasks
        )

    def totals(self) -> dict[str, int]:
        out = {"equal": 0, "expected_different": 0, "unexpected": 0, "tasks": len(self.tasks)}
        for task in self.tasks:
            for diff in task.stores.values():
                out["equal"] += diff.equal
                out["expected_different"] += diff.expected_different
                out["unexpected"] += diff.unexpected
        out["misaligned_tasks"] = sum(not t.aligned for t in self.tasks)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "totals": self.totals(),
            "tasks": [t.as_dict() for t in self.tasks],
        }


#: ``expected(key, migrated, new) -> bool``: a difference the new version makes on purpose.
Compare = Callable[[Any, Any, Any], bool]


def verify_migration(
    job: MigrationJob,
    task_ids: Iterable[str],
    *,
    scratch_root: Path | None = None,
    compare: Mapping[str, Compare] | None = None,
    ends: Mapping[str, int] | None = None,
) -> VerifyReport:
    """Read both versions of every task in ``task_ids`` and compare (module docstring).
    ``compare``: per store, the expected-difference function; ``ends``: align tasks by the
    log ends of their inputs (``topic:partition`` -> end) instead of by the migration's
    commit, and leave the internal task-state stores out (stream time, punctuation times,
    dedupe positions: each version's bookkeeping of its own topics, which a version that ran
    on keeps apart from the other's)."""
    report = VerifyReport()
    for task_id in task_ids:
        report.tasks.append(_verify_task(job, task_id, scratch_root, compare or {}, ends))
    return report


def _verify_task(
    job: MigrationJob,
    task_id: str,
    scratch_root: Path | None,
    compare: Mapping[str, Compare],
    ends: Mapping[str, int] | None,
) -> TaskDiff:
    tid = TaskId.parse(task_id)
    new_specs = job.new_topology.store_specs(tid.subtopology)
    old_specs = carried_specs(job, tid.subtopology)
    with (
        old_task_state(
            job.old_settings, task_id, tid.partition, old_specs, scratch_root=scratch_root
        ) as old,
        old_task_state(
            job.new_settings, task_id, tid.partition, new_specs, scratch_root=scratch_root
        ) as new,
    ):
        old_batch, old_offsets, _ = committed_batch(old) if old_specs else (None, {}, [])
        new_batch, new_offsets, _ = committed_batch(new)
        carried = job.carried_offsets(old_offsets)
        if ends is None:
            aligned = (old_batch, carried) == (new_batch, new_offsets) or (
                old_batch is None and new_batch is None
            )
            positions = f"old batch {old_batch} {carried}; new batch {new_batch} {new_offsets}"
        else:
            own = {
                tp: o
                for tp, o in new_offsets.items()
                if tp.rpartition(":")[0] not in job.old_repartition_topics  # read once
            }
            behind = [
                f"{version} {tp} at {o} of {ends.get(tp)}"
                for version, offsets in (("old", old_offsets), ("new", own))
                for tp, o in sorted(offsets.items())
                if o != ends.get(tp)
            ]
            aligned, positions = not behind, "; ".join(behind) or "both at the log ends"
        diff = TaskDiff(task_id, aligned, positions)
        for spec in new_specs:
            if ends is not None and spec.name.startswith(TASK_STATE_PREFIX):
                continue
            diff.stores[spec.name] = _store_diff(
                job, spec.name, old, new, old_batch, compare.get(spec.name)
            )
    return diff


def _store_diff(
    job: MigrationJob,
    store: str,
    old: Any,
    new: Any,
    old_batch: Any,
    expected_difference: Compare | None = None,
) -> StoreDiff:
    step = job.step(store)
    carried = old_batch is not None and step.action in (StoreAction.COPY, StoreAction.MIGRATE)
    before = dict(store_entries(old.store(store))) if carried else {}
    if step.action is StoreAction.MIGRATE and carried:
        expected = dict(migrated_entries(job.migrations[store], before.items(), StoreCounts()))
    else:
        expected = dict(before) if carried else {}
    actual = dict(store_entries(new.store(store)))
    diff = StoreDiff()
    for key in expected.keys() | actual.keys():
        if key in expected and key in actual and expected[key] == actual[key]:
            if key in before and before[key] == actual[key]:
                diff.equal += 1
            else:
                diff.expected_different += 1
            continue
        if expected_difference is not None and expected_difference(
            key, expected.get(key), actual.get(key)
        ):
            diff.expected_different += 1
            continue
        diff.unexpected += 1
        if len(diff.examples) < EXAMPLES:
            want = expected.get(key, "<absent>")
            got = actual.get(key, "<absent>")
            diff.examples.append(f"{key!r}: expected {want!r}, found {got!r}")
    return diff
