"""What migrating an app does with each store: from the two versions' fingerprints and the
migrations the new version declares.

The old topology is fingerprinted under the NEW application id, so the comparison
(:func:`statekeeper.versions.compatibility.compare`) says what the stored bytes mean, not
that every changelog topic is renamed. Per store of either version:

* ``copy``: ``unchanged`` or ``compatible`` and no migration declared: its entries are
  written as they are;
* ``migrate``: a migration is declared (whatever the verdict);
* ``empty``: ``new`` in this version: it starts empty;
* ``skip``: ``dropped``: not read.

Refused, one line naming every case: a ``needs-migration`` store without a migration, a
migration declared for a store the new version does not have (or a new one), a carried
store that moved to another subtopology or whose changelog was off in the old version (its
state lives only in the old app's local directories, which are not read). A source topic's
partition count change is not a store's: :mod:`statekeeper.migration.rekey_plan` decides
it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from statekeeper.migration.functions import MigrationRefused
from statekeeper.versions.compatibility import StoreChange, UpgradePlan
from statekeeper.versions.fingerprint import TopologyFingerprint


class StoreAction(StrEnum):
    """What happens to one store (module docstring)."""

    COPY = "copy"
    MIGRATE = "migrate"
    EMPTY = "empty"
    SKIP = "skip"


@dataclass(frozen=True)
class StoreStep:
    """One store's action, its verdict, and the subtopology its tasks belong to."""

    store: str
    action: StoreAction
    change: StoreChange
    subtopology: int | None
    detail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "store": self.store,
            "action": str(self.action),
            "change": str(self.change),
            "subtopology": self.subtopology,
            "detail": self.detail,
        }


def store_steps(
    plan: UpgradePlan,
    old: TopologyFingerprint,
    new: TopologyFingerprint,
    declared: set[str],
) -> list[StoreStep]:
    """Every store's step, sorted by name; raises :class:`MigrationRefused` with every
    problem (module docstring) in one line."""
    problems: list[str] = []
    steps = []
    for verdict in plan.stores:
        name = verdict.store
        before, after = old.store(name), new.store(name)
        if verdict.change is StoreChange.NEW:
            if name in declared:
                problems.append(
                    f"store {name}: a migration is declared but the old version has no such store"
                )
            steps.append(StoreStep(name, StoreAction.EMPTY, verdict.change, _sub(after)))
            continue
        if verdict.change is StoreChange.DROPPED:
            if name in declared:
                problems.append(
                    f"store {name}: a migration is declared but this version has no such store"
                )
            steps.append(StoreStep(name, StoreAction.SKIP, verdict.change, _sub(before)))
            continue
        assert before is not None and after is not None
        if name in declared:
            action = StoreAction.MIGRATE
        elif verdict.change is StoreChange.NEEDS_MIGRATION:
            problems.append(
                f"{verdict.reason}: needs a migration and none is declared "
                f"(migrations: {{{name}: {{record: file.py:function}}}})"
            )
            continue
        else:
            action = StoreAction.COPY
        if before.subtopology != after.subtopology:
            problems.append(
                f"store {name}: moves from subtopology {before.subtopology} to "
                f"{after.subtopology} (moving state between tasks is not implemented yet)"
            )
        elif not before.logging:
            problems.append(
                f"store {name}: the old version does not log it, so its state is only in the "
                "old app's local task directories, which migrate does not read"
            )
        steps.append(StoreStep(name, action, verdict.change, after.subtopology, verdict.detail))
    if problems:
        raise MigrationRefused("cannot migrate: " + "; ".join(problems))
    return sorted(steps, key=lambda s: s.store)


def _sub(store: Any) -> int | None:
    return None if store is None else int(store.subtopology)
