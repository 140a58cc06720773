"""The drill record: what one drill did and found (JSON in the report dir, a history row).

Plain dataclasses, no I/O: :mod:`statekeeper.ops.drill.history` stores them and
:mod:`statekeeper.ops.drill.report_html` renders them.

A drill ends ``pass``, ``fail`` (a check failed) or ``error`` (it could not finish: bad
input, broker down, a bug); an errored drill is recorded too, with what it got to before the
error, so it shows in the history and the trend.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

PASS, FAIL, SKIPPED, ERROR = "pass", "fail", "skipped", "error"
#: The checks of a drill, in report order (``spark`` only with ``--spark``).
CHECKS = ("integrity", "consistency", "truth", "quality", "spark")
#: Example keys kept per store and check (the issue: up to 20).
MAX_EXAMPLES = 20
#: The sides a mismatch can show, in display order after ``key`` (``restored`` first).
SIDES = ("restored", "recomputed", "expected", "live")
#: Derived fields of :meth:`DrillRecord.as_dict`, dropped again by :meth:`DrillRecord.from_dict`.
_DERIVED = ("passed", "status", "checks", "failures")

Mismatch = dict[str, str | None]


def format_mismatch(mismatch: Mismatch) -> str:
    """``key: restored 5, recomputed 6, live absent`` (sides left out are not known)."""
    sides = [s for s in SIDES if s in mismatch] + [
        s for s in mismatch if s not in SIDES and s != "key"
    ]
    shown = ", ".join(
        f"{side} {'absent' if mismatch[side] is None else mismatch[side]}" for side in sides
    )
    return f"{mismatch.get('key')}: {shown}"


@dataclass
class CheckResult:
    """One check of one store: ``pass``, ``fail`` or ``skipped``, and why."""

    status: str
    detail: str = ""
    #: Example keys (decoded for display) of what differs, at most :data:`MAX_EXAMPLES`.
    examples: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)  # e.g. missing / unexpected / differ
    #: The same keys with their values, where the check knows them: ``{"key": ..., "restored":
    #: ..., "recomputed" (or "expected"): ..., "live": ...}``, values decoded for display,
    #: None where the key is absent on that side; a side that is not known is left out.
    mismatches: list[Mismatch] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status == FAIL

    def mismatch_lines(self) -> list[str]:
        """One line per mismatching key with its values (:func:`format_mismatch`)."""
        return [format_mismatch(m) for m in self.mismatches]


@dataclass
class StoreDrill:
    """A restored store and its checks."""

    task: str
    store: str
    kind: str
    source: str  # "snapshot", "full replay", "changelog (in-memory store)", ...
    snapshot_id: str | None = None
    records_replayed: int = 0
    bytes_downloaded: int = 0
    key_count: int = 0
    batch_id: int | None = None
    marker_offset: int | None = None
    source_offsets: dict[str, int] = field(default_factory=dict)
    #: RPO, first: committed changelog records after the restored marker, up to the live
    #: head (the changelog's last commit marker). None when not measured (logging off).
    committed_records_behind: int | None = None
    #: RPO, second: seconds between the store's snapshot and the drill (None: no snapshot).
    snapshot_age_s: float | None = None
    #: Every changelog offset after the restored marker: committed records, markers, an
    #: uncommitted tail and fenced records alike.
    changelog_records_behind: int | None = None
    data_docs: str | None = None  # path of this store's validation page, relative to the report
    checks: dict[str, CheckResult] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(c.failed for c in self.checks.values())


@dataclass
class DrillRecord:
    """One drill (see the module docstring of :mod:`statekeeper.ops.drill`)."""

    drill_id: str
    app: str
    started_at: str
    finished_at: str = ""
    from_snapshot: str = "latest"
    sandbox: str = ""
    report_dir: str = ""
    report_html: str = ""
    data_docs_index: str | None = None
    #: Why the drill could not finish (then its status is ``error``); None when it finished.
    error: str | None = None
    #: Seconds from the start of the sandbox restore until every task was open (usable).
    rto_s: float = 0.0
    wall_s: float = 0.0
    #: RPO, first: committed changelog records between the restored markers and the live
    #: head (each changelog's last commit marker), summed over the stores.
    committed_records_behind: int = 0
    #: RPO, second: the oldest snapshot among the restored stores (None when nothing came
    #: from a snapshot).
    snapshot_age_s: float | None = None
    changelog_records_behind: int = 0  # every changelog offset after the restored markers
    source_records_behind: int = 0  # source records the restored state has not processed
    records_replayed: int = 0
    bytes_downloaded: int = 0
    live_mode: dict[str, str] = field(default_factory=dict)  # task -> how consistency ran
    #: Seconds per phase (restore, rpo, integrity, consistency, truth, spark, quality).
    phase_s: dict[str, float] = field(default_factory=dict)
    stores: list[StoreDrill] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.stores) and not any(s.failed for s in self.stores)

    @property
    def status(self) -> str:
        """``error`` (it could not finish), ``pass`` or ``fail``."""
        if self.error is not None:
            return ERROR
        return PASS if self.passed else FAIL

    def check_status(self, check: str) -> str:
        """``fail`` if any store failed it, ``pass`` if any passed, else ``skipped``."""
        statuses = {s.checks[check].status for s in self.stores if check in s.checks}
        if FAIL in statuses:
            return FAIL
        return PASS if PASS in statuses else SKIPPED

    def failures(self) -> list[str]:
        """The error, if any, then one line per failed check of a store, naming the store and
        example keys."""
        lines = [f"error: {self.error}"] if self.error is not None else []
        for s in self.stores:
            for name, check in s.checks.items():
                if check.failed:
                    keys = f" keys: {', '.join(check.examples)}" if check.examples else ""
                    lines.append(f"{s.task} {s.store} {name}: {check.detail}{keys}")
        if not self.stores and self.error is None:
            lines.append("no store was restored")
        return lines

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        data["status"] = self.status
        data["checks"] = {c: self.check_status(c) for c in CHECKS}
        data["failures"] = self.failures()
        return data

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2, sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DrillRecord:
        """Inverse of :meth:`as_dict` (derived fields are dropped; records written before a
        field existed get its default)."""
        raw = {k: v for k, v in data.items() if k not in _DERIVED}
        stores = []
        for s in raw.pop("stores", []):
            fields = {k: v for k, v in s.items() if k != "checks"}
            checks = {k: CheckResult(**v) for k, v in s.get("checks", {}).items()}
            stores.append(StoreDrill(**fields, checks=checks))
        return cls(**raw, stores=stores)
