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
from statekeeper.migration.rekey import router
from statekeeper.migration.rekey_plan import Rekey
from statekeeper.migration.store_plan import StoreAction
from statekeeper.migration.task import MigrationJob, carried_specs
from statekeeper.processing.task_state_store import merged_task_state
from statekeeper.state.task_id import TaskId
from statekeeper.stores.typed import typed_entries
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
    on keeps apart from the other's). A re-keyed subtopology's old tasks are read together
    and each key is expected in the new task its key routes to."""
    report = VerifyReport()
    regrouped: dict[int, Mapping[int, _OldSide]] = {}
    for task_id in sorted(task_ids, key=TaskId.parse):
        tid = TaskId.parse(task_id)
        rekey = job.rekey_of(tid.subtopology)
        if rekey is None:
            old = _old_side(job, task_id, scratch_root)
        else:
            if tid.subtopology not in regrouped:
                regrouped[tid.subtopology] = _rekeyed_old_sides(job, rekey, scratch_root)
            old = regrouped[tid.subtopology][tid.partition]
        report.tasks.append(_verify_task(job, task_id, old, scratch_root, compare or {}, ends))
    return report


@dataclass
class _OldSide:
    """What one new task should hold: the old commit(s) it continues (``batch`` None: none)
    and per store the old entries (``before``) and the entries the migration gives
    (``expected``)."""

    batch: int | None
    offsets: dict[str, int]
    before: dict[str, dict[Any, Any]] = field(default_factory=dict)
    expected: dict[str, dict[Any, Any]] = field(default_factory=dict)


def _old_side(job: MigrationJob, task_id: str, scratch_root: Path | None) -> _OldSide:
    tid = TaskId.parse(task_id)
    specs = carried_specs(job, tid.subtopology)
    if not specs:
        return _OldSide(None, {})
    with old_task_state(
        job.old_settings, task_id, tid.partition, specs, scratch_root=scratch_root
    ) as old:
        batch, offsets, _ = committed_batch(old)
        side = _OldSide(batch, offsets)
        if batch is not None:
            for spec in specs:
                side.before[spec.name] = before = dict(typed_entries(old.store(spec.name)))
                side.expected[spec.name] = _migrated(job, spec.name, before)
    return side


def _rekeyed_old_sides(
    job: MigrationJob, rekey: Rekey, scratch_root: Path | None
) -> dict[int, _OldSide]:
    """Per new task of a re-keyed subtopology, what it should hold: every old task read,
    its entries migrated and routed by key, the commits merged (the newest batch, every
    offset), the task state merged."""
    sub = rekey.subtopology
    sides = {p: _OldSide(None, {}) for p in range(rekey.new_tasks)}
    states: dict[int, list[tuple[str, Any]]] = {}
    for q in range(rekey.old_tasks):
        old = _old_side(job, str(TaskId(sub, q)), scratch_root)
        if old.batch is None:
            continue
        for side in sides.values():
            side.batch = max(old.batch, -1 if side.batch is None else side.batch)
            side.offsets.update(old.offsets)
        for store, expected in old.expected.items():
            if store.startswith(TASK_STATE_PREFIX):
                states[q] = list(expected.items())
                continue
            route = router(job, sub, store, rekey.new_tasks)
            for key, value in expected.items():
                side = sides[route(key)]
                side.expected.setdefault(store, {})[key] = value
                if key in old.before[store]:
                    side.before.setdefault(store, {})[key] = old.before[store][key]
    for spec in carried_specs(job, sub):
        for side in sides.values():
            side.expected.setdefault(spec.name, {})
            side.before.setdefault(spec.name, {})
            if spec.name.startswith(TASK_STATE_PREFIX):
                merged = dict(merged_task_state(states, job.old_repartition_topics))
                side.expected[spec.name] = side.before[spec.name] = merged
    return sides


def _migrated(job: MigrationJob, store: str, before: dict[Any, Any]) -> dict[Any, Any]:
    if job.step(store).action is StoreAction.MIGRATE:
        return dict(migrated_entries(job.migrations[store], before.items(), StoreCounts()))
    return dict(before)


def _verify_task(
    job: MigrationJob,
    task_id: str,
    old: _OldSide,
    scratch_root: Path | None,
    compare: Mapping[str, Compare],
    ends: Mapping[str, int] | None,
) -> TaskDiff:
    tid = TaskId.parse(task_id)
    new_specs = job.new_topology.store_specs(tid.subtopology)
    with old_task_state(
        job.new_settings, task_id, tid.partition, new_specs, scratch_root=scratch_root
    ) as new:
        new_batch, new_offsets, _ = committed_batch(new)
        carried = job.carried_offsets(old.offsets)
        if ends is None:
            aligned = (old.batch, carried) == (new_batch, new_offsets) or (
                old.batch is None and new_batch is None
            )
            positions = f"old batch {old.batch} {carried}; new batch {new_batch} {new_offsets}"
        else:
            own = {
                tp: o
                for tp, o in new_offsets.items()
                if tp.rpartition(":")[0] not in job.old_repartition_topics  # read once
            }
            behind = [
                f"{version} {tp} at {o} of {ends.get(tp)}"
                for version, offsets in (("old", old.offsets), ("new", own))
                for tp, o in sorted(offsets.items())
                if o != ends.get(tp)
            ]
            aligned, positions = not behind, "; ".join(behind) or "both at the log ends"
        diff = TaskDiff(task_id, aligned, positions)
        for spec in new_specs:
            if ends is not None and spec.name.startswith(TASK_STATE_PREFIX):
                continue
            step = job.step(spec.name)
            carried_store = old.batch is not None and step.action in (
                StoreAction.COPY,
                StoreAction.MIGRATE,
            )
            diff.stores[spec.name] = _store_diff(
                old.before.get(spec.name, {}) if carried_store else {},
                old.expected.get(spec.name, {}) if carried_store else {},
                dict(typed_entries(new.store(spec.name))),
                compare.get(spec.name),
            )
    return diff


def _store_diff(
    before: dict[Any, Any],
    expected: dict[Any, Any],
    actual: dict[Any, Any],
    expected_difference: Compare | None = None,
) -> StoreDiff:
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
