"""What a backfill reports: a progress line per micro-batch and the final report."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from statekeeper.backfill.bounds import records_left
from statekeeper.spark.offset_planning import offsets_to_dict

TP = tuple[str, int]


@dataclass
class BackfillReport:
    """The final report (``--json`` prints :meth:`to_dict`)."""

    application_id: str
    start: str  # how the query started (StartPlan.note)
    from_: str  # --from: "earliest" or the timestamp
    start_offsets: dict[TP, int]  # source positions before the backfill
    until: dict[TP, int]
    stream_continues_at: dict[TP, int]  # source positions after it: where the stream goes on
    source_records: int
    records_processed: int  # by every task, repartitioned records included
    batches: int
    seconds: float
    tasks: int
    max_records_per_batch: int
    checkpoint: str
    snapshot: dict[str, Any] | None = None  # request id, state, ids per task and store
    notes: list[str] = field(default_factory=list)

    @property
    def records_per_s(self) -> float | None:
        return round(self.source_records / self.seconds, 1) if self.seconds > 0 else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["from"] = out.pop("from_")
        for key in ("start_offsets", "until", "stream_continues_at"):
            out[key] = offsets_to_dict(getattr(self, key))
        out["records_per_s"] = self.records_per_s
        out["seconds"] = round(self.seconds, 3)
        return out

    def text(self) -> str:
        rate = f"{self.records_per_s:,.0f} records/s" if self.records_per_s else "-"
        lines = [
            f"backfill {self.application_id}: {self.start}",
            f"  {self.source_records:,} source records ({self.records_processed:,} processed "
            f"by {self.tasks} tasks) in {self.batches} micro-batches, {self.seconds:.1f} s: "
            f"{rate}",
        ]
        lines += [f"  note: {note}" for note in self.notes]
        if self.snapshot is None:
            lines.append("  snapshot: none (--no-snapshot)")
        else:
            ids = self.snapshot.get("snapshot_ids") or {}
            shown = ", ".join(
                f"{task}/{store}={sid}"
                for task, stores in sorted(ids.items())
                for store, sid in sorted(stores.items())
            )
            lines.append(
                f"  snapshot {self.snapshot.get('request_id')}: {self.snapshot.get('state')}"
                + (f": {shown}" if shown else "")
            )
        lines.append(f"  until: {format_offsets(self.until)}")
        lines.append(f"  the stream continues at: {format_offsets(self.stream_continues_at)}")
        return "\n".join(lines)


def format_offsets(offsets: Mapping[TP, int]) -> str:
    """``lines[0]=120 lines[1]=98``."""
    return " ".join(f"{t}[{p}]={o}" for (t, p), o in sorted(offsets.items())) or "-"


class Progress:
    """Turns the app's per-batch callback into one line per micro-batch: the batch's source
    records and what is left below ``--until``."""

    def __init__(self, until: Mapping[TP, int], start: Mapping[TP, int], emit: Any) -> None:
        self._until = dict(until)
        self._last = {tp: start.get(tp, 0) for tp in until}
        self._emit = emit

    def __call__(self, batch: dict[str, Any], positions: Mapping[TP, int]) -> None:
        now = {tp: max(self._last[tp], positions.get(tp, self._last[tp])) for tp in self._until}
        source = sum(now[tp] - self._last[tp] for tp in now)
        self._last = now
        self._emit(
            f"batch {batch.get('batch_id')}: {source:,} source records "
            f"({batch.get('records', 0):,} processed) in {batch.get('seconds', 0):.2f} s; "
            f"{records_left(self._until, now):,} source records left below --until"
        )
