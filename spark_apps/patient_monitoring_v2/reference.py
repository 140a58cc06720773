"""Reference model of patient_monitoring v2: plain per-record Python, no statekeeper runtime.

v1's contract (spark_apps/patient_monitoring/reference.py: one task per input partition,
DLQ rules, stream time, pulse windows, suppression, alerts, checkouts, retention), run by
v1's model, with v2's two changes:

- a heart-rate entry (table and output) is ``{"bpm", "window_start", "window_end"}``,
  ``window_end = window_start + 60000``;
- ``temperature-peaks``: per patient and 60 s tumbling window (5 s grace, as the pulses) of
  a valid temperature reading, ``{"max_temp_f": highest temp_f, "readings": n}``. A reading
  is late - dropped and counted - when ``start + 60000 + 5000 <= stream time before the
  record``; a checkout deletes the patient's windows; retention as ``pulse-counts`` (a
  window is kept while ``start >= largest window start written - 6 h + 1``).

After an upgrade (``upgraded_at``: per partition of the input, the first offset v2
processed; v1's state as it committed the records before it was migrated),
``temperature-peaks`` holds only the readings from there on: it started empty. Everything
else is as if one version had read the whole input. After a takeover ``upgraded_at`` is the
takeover's floor, where v1's task committed, not where v1's last micro-batch ended: the
records of micro-batches v1 processed but had not committed are processed again by v2, and
count. Each output is tagged with the input record it came from (its ``sk.source``): v2
emits the outputs of the records from ``upgraded_at`` on, v1 (on its own topics) the others
(and, of micro-batches it had not committed, some of v2's).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from statekeeper.kafka.model import KafkaRecord
from statekeeper.recompute.grouping import RecordsInput, by_task

from ..patient_monitoring import reference as v1

WINDOW_MS = v1.WINDOW_MS
GRACE_MS = v1.GRACE_MS
RETENTION_MS = v1.RETENTION_MS


@dataclass
class PatientV2Result(v1.PatientResult):
    """v1's result with v2's heart-rate entries, and ``temperature_peaks`` keyed
    ``(patient, window start)``."""

    temperature_peaks: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    #: The input record each alert and heart-rate output came from (an output's
    #: ``sk.source``), in the order of ``alerts`` and ``heart_rate_outputs``.
    alert_sources: list[v1.Position] = field(default_factory=list)
    heart_rate_output_sources: list[v1.Position] = field(default_factory=list)


def heart_rate_entry(entry: dict[str, int]) -> dict[str, int]:
    """A v1 heart-rate entry as v2 computes it."""
    return {**entry, "window_end": entry["window_start"] + WINDOW_MS}


class _Task(v1._Task):
    """One task (input partition): v1's, plus the temperature windows."""

    def __init__(self, result: PatientV2Result, upgraded_at: int | None) -> None:
        super().__init__(result)
        self.v2_result = result
        self.upgraded_at = upgraded_at
        self.peaks: dict[tuple[str, int], dict[str, Any]] = {}
        self.max_peak_start: int | None = None
        self.v2 = upgraded_at is None

    def process(self, record: KafkaRecord) -> None:
        self.v2 = self.upgraded_at is None or record.offset >= self.upgraded_at
        result = self.v2_result
        alerts, outputs = len(result.alerts), len(result.heart_rate_outputs)
        super().process(record)
        source = (record.topic, record.partition, record.offset)
        result.alert_sources += [source] * (len(result.alerts) - alerts)
        result.heart_rate_output_sources += [source] * (len(result.heart_rate_outputs) - outputs)

    def _temperature(self, patient: str, ts: int, temp_f: float) -> None:
        super()._temperature(patient, ts, temp_f)
        if not self.v2:
            return
        start = v1.window_start(ts)
        before = self.stream_time  # v1's model moves it after this call
        if before is not None and start + WINDOW_MS + GRACE_MS <= before:
            self.result.late_dropped += 1
            return
        window = self.peaks.get((patient, start))
        if window is None:
            window = self.peaks[(patient, start)] = {"max_temp_f": temp_f, "readings": 0}
        window["max_temp_f"] = max(window["max_temp_f"], temp_f)
        window["readings"] += 1
        if self.max_peak_start is None or start > self.max_peak_start:
            self.max_peak_start = start

    def _checkout(self, patient: str) -> None:
        super()._checkout(patient)
        for window in [w for w in self.peaks if w[0] == patient]:
            del self.peaks[window]

    def finish(self, retention_ms: int) -> None:
        super().finish(retention_ms)
        peaks = self.result.temperature_peaks  # type: ignore[attr-defined]
        floor = None if self.max_peak_start is None else self.max_peak_start - retention_ms + 1
        for window, value in self.peaks.items():
            if floor is not None and window[1] < floor:
                self.result.windows_expired += 1
            else:
                peaks[window] = value


def recompute(
    records: RecordsInput,
    *,
    retention_ms: int = RETENTION_MS,
    upgraded_at: Mapping[int, int] | None = None,
) -> PatientV2Result:
    """Expected results for ``records`` of the input topic (``{partition: records in offset
    order}`` or a flat iterable in per-partition offset order); ``upgraded_at``: see the
    module docstring (None: v2 read everything)."""
    result = PatientV2Result()
    for (topic, partition), task_records in by_task(records):
        upgrade = None if upgraded_at is None else upgraded_at.get(partition)
        task = _Task(result, upgrade)
        for record in task_records:
            result.records += 1
            task.process(record)
        task.finish(retention_ms)
        if task.stream_time is not None:
            result.stream_time[(topic, partition)] = task.stream_time
    result.heart_rate = {p: heart_rate_entry(e) for p, e in result.heart_rate.items()}
    result.heart_rate_outputs = [
        (p, None if e is None else heart_rate_entry(e)) for p, e in result.heart_rate_outputs
    ]
    return result
