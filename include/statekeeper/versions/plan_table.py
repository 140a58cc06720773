"""An upgrade plan as text: one table of stores, one of topics, then the notes."""

from __future__ import annotations

from statekeeper.versions.compatibility import StoreVerdict, TopicVerdict, UpgradePlan


def plan_text(plan: UpgradePlan, against: str) -> str:
    """The plan of running the new topology on the state ``against`` names, as tables."""
    lines = [f"state: {against}", f"topology {plan.old_digest[:12]} -> {plan.new_digest[:12]}"]
    lines += ["", *_table(["STORE", "CHANGE", "DETAIL"], [_store_row(v) for v in plan.stores])]
    if plan.topics:
        rows = [[f"{v.topic} ({v.role})", str(v.change), v.detail] for v in plan.topics]
        lines += ["", *_table(["TOPIC", "CHANGE", "DETAIL"], rows)]
    notes = [*plan.notes, *_notes(plan.stores), *_notes(plan.topics)]
    if notes:
        lines += ["", "notes:", *(f"  {note}" for note in notes)]
    verdict = (
        "compatible: the new topology starts on this state"
        if plan.compatible
        else f"incompatible: {len(plan.blocking)} change(s) need a migration or repartitioning"
    )
    return "\n".join([*lines, "", verdict])


def _store_row(verdict: StoreVerdict) -> list[str]:
    name = f"{verdict.store} (internal)" if verdict.internal else verdict.store
    return [name, str(verdict.change), verdict.detail]


def _notes(verdicts: tuple[StoreVerdict, ...] | tuple[TopicVerdict, ...]) -> list[str]:
    out = []
    for verdict in verdicts:
        name = verdict.store if isinstance(verdict, StoreVerdict) else verdict.topic
        out += [f"{name}: {note}" for note in verdict.notes]
    return out


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
    return [
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]])
        for row in [header, *rows]
    ]
