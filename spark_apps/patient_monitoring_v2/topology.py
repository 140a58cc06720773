"""patient_monitoring v2: v1's heart rate, alerts and checkouts (see
spark_apps/patient_monitoring/topology.py), with two changes.

patient-events (key patient id, JSON value with ``type``) → validate (bad records → DLQ) →
- pulse: count per patient in 60 s tumbling windows with 5 s grace (window store
  ``pulse-counts``, 6 h retention), suppressed until the window closes; each final count
  becomes ``{"bpm": n, "window_start": s, "window_end": e}`` in table ``heart-rate`` and
  topic ``heart-rate-v2``. v1's entries had no ``window_end``: the store's serde is
  :class:`HeartRateSerde`, whose name is the schema's, so ``upgrade plan`` sees the change
  (``needs-migration``; a plain ``json`` there would hide it);
- temperature: joined with ``heart-rate``; bpm > 100 and temp_f > 100.4 → alerts (as v1).
  New in v2: per patient the peak temperature and number of readings in the same 60 s
  windows (window store ``temperature-peaks``, 5 s grace, 6 h retention) as
  ``{"max_temp_f": t, "readings": n}``; it starts empty after an upgrade;
- checkout: deletes the patient's heart-rate entry (tombstone to the table and the topic),
  pulse windows, pending suppressed windows and, in v2, temperature windows.

Every store keeps v1's name, and the new aggregation is built after v1's streams, so no
other store or subtopology changes.

The spec loads this file by path and Spark ships its functions to the executors by value:
import only statekeeper and the standard library here.
"""

from __future__ import annotations

from numbers import Real
from typing import Any

from statekeeper.processing.dsl import Grouped, Materialized, StreamsBuilder, Suppressed
from statekeeper.processing.errors import InvalidRecordError
from statekeeper.processing.processor import Processor, ProcessorContext, Record
from statekeeper.processing.topology import Topology
from statekeeper.stores.serdes import JsonSerde, SerdeError
from statekeeper.stores.time_windows import TimeWindows

EVENT_TYPES = ("pulse", "temperature", "checkout")
HEART_RATE_STORE = "heart-rate"
PULSE_STORE = "pulse-counts"
SUPPRESS_NAME = "heart-rate-suppress"
TEMPERATURE_STORE = "temperature-peaks"


class HeartRateSerde(JsonSerde):
    """A heart-rate entry, ``{"bpm", "window_start", "window_end"}`` (ints) as JSON, checked
    both ways; recorded in fingerprints and manifests by its :attr:`name`."""

    name = "json/heart-rate-v2"
    FIELDS = ("bpm", "window_end", "window_start")

    def serialize(self, value: Any) -> bytes:
        return super().serialize(self._checked(value))

    def deserialize(self, data: bytes) -> Any:
        return self._checked(super().deserialize(data))

    def _checked(self, value: Any) -> Any:
        if (
            not isinstance(value, dict)
            or tuple(sorted(value)) != self.FIELDS
            or not all(type(value[f]) is int for f in self.FIELDS)
        ):
            raise SerdeError(f"not a {self.name} entry ({', '.join(self.FIELDS)}): {value!r}")
        return value


def validate_event(key: str | None, value: Any) -> None:
    """Raise InvalidRecordError (→ DLQ) for anything the app must not process (as v1)."""
    if key is None:
        raise InvalidRecordError("patient id (record key) is missing")
    if not isinstance(value, dict):
        raise InvalidRecordError(f"value must be a JSON object, got {type(value).__name__}")
    kind = value.get("type")
    if kind not in EVENT_TYPES:
        raise InvalidRecordError(f"unknown or missing event type {kind!r}")
    if kind == "temperature":
        temp = value.get("temp_f")
        if not isinstance(temp, Real) or isinstance(temp, bool):
            raise InvalidRecordError(f"temperature event without numeric temp_f: {temp!r}")


def _of_type(kind: str) -> Any:
    def predicate(_key: str, value: dict[str, Any]) -> bool:
        return value["type"] == kind

    return predicate


def _heart_rate(window: Any, count: int) -> tuple[str, dict[str, int]]:
    return window.key, {"bpm": count, "window_start": window.start, "window_end": window.end}


def _with_heart_rate(event: dict[str, Any], heart_rate: dict[str, int]) -> tuple[Any, Any]:
    return event, heart_rate


def no_reading() -> dict[str, Any]:
    """A temperature window before its first reading."""
    return {"max_temp_f": None, "readings": 0}


def peak(_patient: str, event: dict[str, Any], window: dict[str, Any]) -> dict[str, Any]:
    """One more temperature reading in a window."""
    temp = event["temp_f"]
    highest = window["max_temp_f"]
    return {
        "max_temp_f": temp if highest is None or temp > highest else highest,
        "readings": window["readings"] + 1,
    }


class AlertProcessor(Processor):
    """Temperature ⋈ heart rate → an alert when both are over their thresholds (as v1)."""

    def __init__(self, bpm_threshold: float, temp_threshold: float) -> None:
        self.bpm_threshold = bpm_threshold
        self.temp_threshold = temp_threshold

    def process(self, record: Record) -> None:
        event, heart_rate = record.value
        if heart_rate["bpm"] > self.bpm_threshold and event["temp_f"] > self.temp_threshold:
            alert = {
                "patient_id": record.key,
                "bpm": heart_rate["bpm"],
                "window_start": heart_rate["window_start"],
                "temp_f": event["temp_f"],
                "ts": record.timestamp,
            }
            self.context.forward(record.with_value(alert))


class CheckoutProcessor(Processor):
    """Deletes a checked-out patient's state and forwards a heart-rate tombstone."""

    def __init__(self, buffer_store: str) -> None:
        self.buffer_store = buffer_store

    def init(self, context: ProcessorContext) -> None:
        super().init(context)
        self.heart_rate = context.get_state_store(HEART_RATE_STORE)
        self.windows = [context.get_state_store(s) for s in (PULSE_STORE, TEMPERATURE_STORE)]
        self.pending = context.get_state_store(self.buffer_store)

    def process(self, record: Record) -> None:
        patient = record.key
        self.heart_rate.delete(patient)
        for store in self.windows:
            for start, _value in list(store.fetch_range(patient, 0, 2**62)):
                store.put(patient, None, start)
        self.pending.delete(patient)
        self.context.forward(Record(patient, None, record.timestamp))


def build_topology(
    input_topic: str = "patient-events",
    heart_rate_topic: str = "heart-rate-v2",
    alerts_topic: str = "patient-alerts-v2",
    window_ms: int = 60_000,
    grace_ms: int = 5_000,
    retention_ms: int = 6 * 3600 * 1000,
    bpm_threshold: float = 100,
    temp_threshold: float = 100.4,
) -> Topology:
    """The patient_monitoring v2 topology on the given topics, windows and thresholds."""
    builder = StreamsBuilder()
    events = builder.stream(input_topic, key_serde="str", value_serde="json").peek(
        validate_event, name="validate-event"
    )
    pulses = events.filter(_of_type("pulse"), name="pulses")
    temperatures = events.filter(_of_type("temperature"), name="temperatures")
    checkouts = events.filter(_of_type("checkout"), name="checkouts")

    windows = TimeWindows.tumbling(window_ms, grace_ms=grace_ms)
    pulse_counts = (
        pulses.group_by_key(Grouped.with_("str", "json"))
        .windowed_by(windows)
        .count(Materialized.as_(PULSE_STORE).with_retention(retention_ms))
    )
    closed = pulse_counts.suppress(Suppressed.until_window_closes(SUPPRESS_NAME))
    heart_rate = closed.to_stream().map(_heart_rate, name="heart-rate-values")
    heart_rate.to(heart_rate_topic, key_serde="str", value_serde="json")
    table = heart_rate.to_table(
        Materialized.as_(HEART_RATE_STORE).with_serdes("str", HeartRateSerde())
    )

    (
        temperatures.join(table, _with_heart_rate, name="temperature-with-heart-rate")
        .process_values(lambda: AlertProcessor(bpm_threshold, temp_threshold), name="alerts")
        .to(alerts_topic, key_serde="str", value_serde="json")
    )

    # New in v2, after v1's streams: the same windows over temperature readings.
    (
        temperatures.group_by_key(Grouped.with_("str", "json"))
        .windowed_by(windows)
        .aggregate(
            no_reading,
            peak,
            Materialized.as_(TEMPERATURE_STORE)
            .with_serdes("str", "json")
            .with_retention(retention_ms),
        )
    )

    buffer = closed.buffer_store_name
    assert buffer is not None
    checkouts.process_values(
        lambda: CheckoutProcessor(buffer),
        stores=[HEART_RATE_STORE, PULSE_STORE, TEMPERATURE_STORE, buffer],
        name="checkout",
    ).to(heart_rate_topic, key_serde="str", value_serde="json")
    return builder.build()
