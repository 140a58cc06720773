"""Reference model of the patient_monitoring app: plain per-record Python, no statekeeper runtime.

Written from the contract's semantics (/tmp/issue3/CONTRACTS.md, "The two apps"):

- One task per input partition, records in offset order. Stream time of a task = max
  timestamp of the valid records it has processed (malformed records never count).
- Malformed records go to the DLQ: null key; value not a UTF-8 JSON object; ``type``
  missing or not one of pulse / temperature / checkout; a temperature whose ``temp_f`` is
  not a JSON number (booleans are not numbers).
- pulse: 60 s tumbling window (start = ts - ts % 60000), 5 s grace. Late - dropped and
  counted - when ``start + 60000 + 5000 <= stream time before the record``.
- After each valid record (and after stream time advances to include it), every pending
  window with ``start + 60000 + 5000 <= stream time`` emits its count once (suppress
  until window closes) in (window start, patient) order; the emission upserts table
  ``heart-rate`` and is output to topic ``heart-rate``.
- temperature: looks the patient up in ``heart-rate`` as it stands before this record's
  own emissions; alert if ``bpm > 100`` and ``temp_f > 100.4``.
- checkout: deletes the patient's ``heart-rate`` entry (a tombstone is output, whether or
  not an entry existed), every ``pulse-counts`` window and every pending window.
- ``pulse-counts`` keeps 6 h of windows: a window is visible while ``start >= (largest
  window start written) - retention + 1``, like the window store's ``all()``.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from statekeeper.kafka.model import KafkaRecord
from statekeeper.recompute.grouping import RecordsInput, by_task

WINDOW_MS = 60_000
GRACE_MS = 5_000
RETENTION_MS = 6 * 60 * 60 * 1000
BPM_THRESHOLD = 100
TEMP_THRESHOLD_F = 100.4
EVENT_TYPES = ("pulse", "temperature", "checkout")

#: DLQ reasons, one per rule of the contract.
DLQ_NULL_KEY = "null_key"
DLQ_NOT_JSON_OBJECT = "not_json_object"
DLQ_MISSING_TYPE = "missing_type"
DLQ_UNKNOWN_TYPE = "unknown_type"
DLQ_BAD_TEMPERATURE = "bad_temperature"
DLQ_REASONS = (
    DLQ_NULL_KEY,
    DLQ_NOT_JSON_OBJECT,
    DLQ_MISSING_TYPE,
    DLQ_UNKNOWN_TYPE,
    DLQ_BAD_TEMPERATURE,
)

Position = tuple[str, int, int]  # topic, partition, offset


@dataclass
class PatientResult:
    """Expected state and outputs of patient_monitoring after the given input.

    Lists are in processing order within each partition, partitions in ascending order.
    ``heart_rate_outputs`` holds ``(patient, value or None for a tombstone)``.
    """

    pulse_windows: dict[tuple[str, int], int] = field(default_factory=dict)
    heart_rate: dict[str, dict[str, int]] = field(default_factory=dict)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    heart_rate_outputs: list[tuple[str, dict[str, int] | None]] = field(default_factory=list)
    dlq: list[Position] = field(default_factory=list)
    dlq_reasons: dict[Position, str] = field(default_factory=dict)
    late_dropped: int = 0
    records: int = 0
    #: Final stream time per (topic, partition); absent for a partition with no valid record.
    stream_time: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Windows hidden because they fell out of the 6 h retention.
    windows_expired: int = 0


class Malformed(ValueError):
    """A record that breaks one of the app's input rules; ``reason`` is a DLQ_* constant."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def parse_event(key: bytes | None, value: bytes | None) -> tuple[str, str, dict[str, Any]]:
    """``(patient, type, body)`` of a valid record, else raise :class:`Malformed`."""
    if key is None:
        raise Malformed(DLQ_NULL_KEY, "record key is null")
    try:
        body = json.loads(value.decode("utf-8")) if value is not None else None
    except (UnicodeDecodeError, ValueError) as exc:
        raise Malformed(DLQ_NOT_JSON_OBJECT, f"value is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise Malformed(DLQ_NOT_JSON_OBJECT, f"value is not a JSON object: {type(body).__name__}")
    if "type" not in body:
        raise Malformed(DLQ_MISSING_TYPE, "value has no type")
    kind = body["type"]
    if kind not in EVENT_TYPES:
        raise Malformed(DLQ_UNKNOWN_TYPE, f"unknown type {kind!r}")
    if kind == "temperature" and not _is_number(body.get("temp_f")):
        raise Malformed(DLQ_BAD_TEMPERATURE, f"temp_f is not a number: {body.get('temp_f')!r}")
    try:
        patient = key.decode("utf-8")
    except UnicodeDecodeError:
        patient = key.decode("utf-8", errors="replace")
    return patient, kind, body


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def window_start(ts: int) -> int:
    """Start of the 60 s tumbling window containing ``ts``."""
    return ts - ts % WINDOW_MS


class _Task:
    """State of one task (input partition) of the app."""

    def __init__(self, result: PatientResult) -> None:
        self.result = result
        self.stream_time: int | None = None
        self.windows: dict[tuple[str, int], int] = {}  # pulse-counts
        self.max_window_start: int | None = None
        self.pending: dict[tuple[str, int], int] = {}  # suppression buffer
        self.closing: list[tuple[int, str]] = []  # heap of (window start, patient)
        self.heart_rate: dict[str, dict[str, int]] = {}

    def process(self, record: KafkaRecord) -> None:
        try:
            patient, kind, body = parse_event(record.key, record.value)
        except Malformed as exc:
            position = (record.topic, record.partition, record.offset)
            self.result.dlq.append(position)
            self.result.dlq_reasons[position] = exc.reason
            return
        ts = record.timestamp_ms
        before = self.stream_time
        if kind == "pulse":
            self._pulse(patient, ts, before)
        elif kind == "temperature":
            self._temperature(patient, ts, body["temp_f"])
        else:
            self._checkout(patient)
        self.stream_time = ts if before is None else max(before, ts)
        self._emit_closed()

    def _pulse(self, patient: str, ts: int, before: int | None) -> None:
        start = window_start(ts)
        if before is not None and start + WINDOW_MS + GRACE_MS <= before:
            self.result.late_dropped += 1
            return
        window = (patient, start)
        count = self.windows.get(window, 0) + 1
        self.windows[window] = count
        if self.max_window_start is None or start > self.max_window_start:
            self.max_window_start = start
        if window not in self.pending:
            heapq.heappush(self.closing, (start, patient))
        self.pending[window] = count

    def _temperature(self, patient: str, ts: int, temp_f: float) -> None:
        entry = self.heart_rate.get(patient)
        if entry is not None and entry["bpm"] > BPM_THRESHOLD and temp_f > TEMP_THRESHOLD_F:
            self.result.alerts.append(
                {
                    "patient_id": patient,
                    "bpm": entry["bpm"],
                    "window_start": entry["window_start"],
                    "temp_f": temp_f,
                    "ts": ts,
                }
            )

    def _checkout(self, patient: str) -> None:
        self.heart_rate.pop(patient, None)
        self.result.heart_rate_outputs.append((patient, None))
        for window in [w for w in self.windows if w[0] == patient]:
            del self.windows[window]
        for window in [w for w in self.pending if w[0] == patient]:
            del self.pending[window]  # its heap entry is skipped when it comes up

    def _emit_closed(self) -> None:
        assert self.stream_time is not None
        while self.closing and self.closing[0][0] + WINDOW_MS + GRACE_MS <= self.stream_time:
            start, patient = heapq.heappop(self.closing)
            count = self.pending.pop((patient, start), None)
            if count is None:
                continue  # deleted by a checkout
            value = {"bpm": count, "window_start": start}
            self.heart_rate[patient] = value
            self.result.heart_rate_outputs.append((patient, dict(value)))

    def finish(self, retention_ms: int) -> None:
        floor = None if self.max_window_start is None else self.max_window_start - retention_ms + 1
        for window, count in self.windows.items():
            if floor is not None and window[1] < floor:
                self.result.windows_expired += 1
            else:
                self.result.pulse_windows[window] = self.result.pulse_windows.get(window, 0) + count
        self.result.heart_rate.update(self.heart_rate)


def recompute(
    records: RecordsInput,
    *,
    retention_ms: int = RETENTION_MS,
) -> PatientResult:
    """Expected results for ``records`` of the input topic (see the module docstring).

    ``records`` is ``{partition: records in offset order}`` (as :func:`read_topic` returns)
    or a flat iterable in per-partition offset order. A patient found in two partitions
    (never the case with keyed production) gets the windows of both summed and the
    heart-rate entry of the higher partition.
    """
    result = PatientResult()
    for (topic, partition), task_records in by_task(records):
        task = _Task(result)
        for record in task_records:
            result.records += 1
            task.process(record)
        task.finish(retention_ms)
        if task.stream_time is not None:
            result.stream_time[(topic, partition)] = task.stream_time
    return result


def latest_heart_rate(
    outputs: Iterable[tuple[str, dict[str, int] | None]],
) -> dict[str, dict[str, int]]:
    """The heart-rate table a consumer of the output topic ends with (tombstones delete)."""
    table: dict[str, dict[str, int]] = {}
    for patient, value in outputs:
        if value is None:
            table.pop(patient, None)
        else:
            table[patient] = value
    return table
