"""Input for the patient_monitoring app: pulses, temperatures and checkouts of N patients.

Each patient has a resting heart rate; some have tachycardic episodes (> 100 bpm) and some
run fevers (> 100.4 °F), often during the same episode, which is what raises alerts. Pulse
events come at the heart rate, temperature readings every 30-60 s. Some patients check out
and some of those are re-admitted later (their events resume). Every record's timestamp
is its event time and its key the patient id (``p0042``).

Out-of-order delivery is simulated: ``late_share`` of the pulse and temperature events
arrive late, half a few seconds late (inside the windows' 5 s grace) and half 10 s to
3 min late (beyond it). Malformed records are spread in, cycling through one kind per DLQ
rule of the app (:data:`MALFORMED_KINDS`).

    python -m spark_apps.patient_monitoring.generator --bootstrap 127.0.0.1:9092 --patients 50

(or ``statekeeper generate --app patient-monitoring ...``: the spec's ``generator:`` names
:func:`main`).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from statekeeper.generate import command
from statekeeper.generate.records import GeneratedRecord, check_share

DEFAULT_TOPIC = "patient-events"

#: ``GeneratedRecord.late`` values: delivered a few seconds late (inside the 5 s grace of
#: the app's windows, as far as the record's own window is concerned) or minutes late
#: (beyond it). Whether a record is actually dropped depends on the stream time of the
#: partition it lands in; the reference model decides that.
LATE_WITHIN_GRACE = "within_grace"
LATE_BEYOND_GRACE = "beyond_grace"

#: Malformed kinds and the contract's DLQ rule each one breaks.
MALFORMED_KINDS: dict[str, str] = {
    "null_key": "key is null",
    "invalid_utf8": "value is not JSON (not UTF-8)",
    "not_json": "value is not JSON",
    "not_object": "value is JSON but not an object",
    "null_value": "value is null",
    "missing_type": "no type field",
    "unknown_type": "type is not pulse, temperature or checkout",
    "temp_missing": "temperature without temp_f",
    "temp_not_number": "temperature whose temp_f is not a number",
}

_MINUTE = 60_000

# (delivery ts, patient index, sequence within the patient, event type, record)
_Event = tuple[int, int, int, str, GeneratedRecord]


@dataclass
class _Patient:
    """One simulated patient: stays in hospital and physiological episodes."""

    pid: str
    rest_bpm: float
    rest_temp: float
    stays: list[tuple[int, int, bool]] = field(default_factory=list)  # start, end, checkout
    tachy: list[tuple[int, int, float]] = field(default_factory=list)  # start, end, bpm
    fever: list[tuple[int, int, float]] = field(default_factory=list)  # start, end, °F

    def bpm_at(self, ts: int) -> float:
        for start, end, bpm in self.tachy:
            if start <= ts < end:
                return bpm
        return self.rest_bpm

    def temp_at(self, ts: int) -> float:
        for start, end, temp in self.fever:
            if start <= ts < end:
                return temp
        return self.rest_temp


def patient_events(
    patients: int = 50,
    minutes: float = 30.0,
    *,
    seed: int = 1,
    start_ms: int = 1_700_000_000_000,
    malformed_share: float = 0.005,
    late_share: float = 0.01,
    checkout_share: float = 0.2,
    readmit_share: float = 0.5,
    tachycardic_share: float = 0.3,
    fever_share: float = 0.25,
) -> list[GeneratedRecord]:
    """Events of ``patients`` patients over ``minutes`` from ``start_ms``, in delivery order.

    The same arguments give the same records. Exactly ``round(late_share * pulses and
    temperatures)`` events are delayed, and malformed records make up ``malformed_share``
    of the output (rounded).
    """
    for name, share in (
        ("malformed_share", malformed_share),
        ("late_share", late_share),
        ("checkout_share", checkout_share),
        ("readmit_share", readmit_share),
        ("tachycardic_share", tachycardic_share),
        ("fever_share", fever_share),
    ):
        check_share(name, share)
    if patients < 1 or minutes <= 0:
        raise ValueError(f"need patients >= 1 and minutes > 0, got {patients}, {minutes}")
    end_ms = start_ms + int(minutes * _MINUTE)
    shares = (checkout_share, readmit_share, tachycardic_share, fever_share)
    events: list[_Event] = []
    for index in range(patients):
        rng = random.Random(seed * 1_000_003 + index)
        patient = _simulate_patient(rng, f"p{index:04d}", start_ms, end_ms, *shares)
        for seq, (kind, record) in enumerate(_patient_records(rng, patient)):
            events.append((record.timestamp_ms, index, seq, kind, record))

    rng = random.Random(seed)
    _delay(rng, events, late_share)
    events.sort(key=lambda event: event[:3])
    return _with_malformed(rng, [event[4] for event in events], malformed_share, patients)


def _simulate_patient(
    rng: random.Random,
    pid: str,
    start_ms: int,
    end_ms: int,
    checkout_share: float,
    readmit_share: float,
    tachycardic_share: float,
    fever_share: float,
) -> _Patient:
    duration = end_ms - start_ms
    patient = _Patient(pid, rest_bpm=rng.uniform(58, 95), rest_temp=rng.uniform(97.4, 99.3))
    stay_start = start_ms + rng.randrange(0, min(duration, _MINUTE))
    if rng.random() < checkout_share:
        checkout = stay_start + int(rng.uniform(0.3, 0.8) * (end_ms - stay_start))
        patient.stays.append((stay_start, checkout, True))
        back = checkout + rng.randrange(2 * _MINUTE, 10 * _MINUTE)
        if rng.random() < readmit_share and back < end_ms:
            patient.stays.append((back, end_ms, False))
    else:
        patient.stays.append((stay_start, end_ms, False))

    sick = rng.random() < tachycardic_share
    if sick:
        for _ in range(rng.randint(1, 3)):
            length = rng.randrange(3 * _MINUTE, 10 * _MINUTE)
            begin = start_ms + rng.randrange(0, max(1, duration - length // 2))
            patient.tachy.append((begin, begin + length, rng.uniform(104, 145)))
            if rng.random() < 0.6:  # fever during the episode: the alert case
                shift = rng.randrange(_MINUTE, 3 * _MINUTE)
                patient.fever.append((begin + shift, begin + length + shift, _fever(rng)))
    if rng.random() < fever_share * (0.5 if sick else 1.0):
        length = rng.randrange(4 * _MINUTE, 15 * _MINUTE)
        begin = start_ms + rng.randrange(0, max(1, duration - length // 2))
        patient.fever.append((begin, begin + length, _fever(rng)))
    return patient


def _fever(rng: random.Random) -> float:
    return rng.uniform(100.2, 103.5)  # some fevers sit at or under the 100.4 threshold


def _patient_records(rng: random.Random, patient: _Patient) -> list[tuple[str, GeneratedRecord]]:
    """(event type, record) of one patient in event-time order."""
    key = patient.pid.encode()
    out: list[tuple[str, GeneratedRecord]] = []
    for stay_start, stay_end, checkout in patient.stays:
        t = float(stay_start)
        while True:
            t += 60_000.0 / (patient.bpm_at(int(t)) * rng.uniform(0.97, 1.03))
            if t >= stay_end:
                break
            ts = int(t)
            out.append(("pulse", GeneratedRecord(key, _pulse_json(patient.pid, ts), ts)))
        ts = stay_start + rng.randrange(0, 30_000)
        while ts < stay_end:
            temp = round(patient.temp_at(ts) + rng.uniform(-0.2, 0.2), 1)
            value = _json("temperature", patient.pid, ts, temp_f=temp)
            out.append(("temperature", GeneratedRecord(key, value, ts)))
            ts += rng.randrange(30_000, 60_001)
        if checkout:
            value = _json("checkout", patient.pid, stay_end)
            out.append(("checkout", GeneratedRecord(key, value, stay_end)))
    out.sort(key=lambda item: item[1].timestamp_ms)
    return out


_ENCODER = json.JSONEncoder(separators=(",", ":"))


def _json(kind: str, pid: str, ts: int, **extra: object) -> bytes:
    body = {"type": kind, "patient_id": pid, "ts": ts, **extra}
    return _ENCODER.encode(body).encode()


def _pulse_json(pid: str, ts: int) -> bytes:
    # Same bytes as _json("pulse", pid, ts), without the encoder (the hot path).
    return b'{"type":"pulse","patient_id":"%s","ts":%d}' % (pid.encode(), ts)


def _delay(rng: random.Random, events: list[_Event], late_share: float) -> None:
    """Postpone the delivery of ``late_share`` of pulses and temperatures, in place."""
    eligible = [i for i, event in enumerate(events) if event[3] != "checkout"]
    chosen = rng.sample(eligible, round(len(eligible) * late_share))
    for n, i in enumerate(chosen):
        ts, index, seq, kind, record = events[i]
        if n % 2 == 0:
            delay, late = rng.randrange(1_000, 4_001), LATE_WITHIN_GRACE
        else:
            delay, late = rng.randrange(10_000, 180_001), LATE_BEYOND_GRACE
        late_record = GeneratedRecord(record.key, record.value, record.timestamp_ms, late=late)
        events[i] = (ts + delay, index, seq, kind, late_record)


def _with_malformed(
    rng: random.Random, valid: list[GeneratedRecord], share: float, patients: int
) -> list[GeneratedRecord]:
    if share >= 1.0:
        raise ValueError("malformed_share must be below 1 for patient events")
    count = round(len(valid) * share / (1.0 - share))
    total = len(valid) + count
    positions = set(rng.sample(range(total), count))
    kinds = list(MALFORMED_KINDS)
    out: list[GeneratedRecord] = []
    source = iter(valid)
    made = 0
    last_ts = valid[0].timestamp_ms if valid else 0
    for position in range(total):
        if position in positions:
            kind = kinds[made % len(kinds)]
            made += 1
            pid = f"p{rng.randrange(patients):04d}"
            out.append(_malformed(rng, kind, pid, last_ts))
        else:
            record = next(source)
            last_ts = max(last_ts, record.timestamp_ms) if record.late is None else last_ts
            out.append(record)
    return out


def _malformed(rng: random.Random, kind: str, pid: str, ts: int) -> GeneratedRecord:
    key: bytes | None = pid.encode()
    value: bytes | None
    if kind == "null_key":
        key, value = None, _json("pulse", pid, ts)
    elif kind == "invalid_utf8":
        value = b'{"type":"pulse","patient_id":"' + pid.encode() + b'","note":"\xff\xfe\xc3"}'
    elif kind == "not_json":
        value = rng.choice(
            (f"pulse;{pid};{ts}".encode(), b'{"type":"pulse","ts":17', b"HR=88 bpm", b"")
        )
    elif kind == "not_object":
        value = rng.choice((b'["pulse",72]', b'"pulse"', b"72", b"null", b"true"))
    elif kind == "null_value":
        value = None
    elif kind == "missing_type":
        value = json.dumps({"patient_id": pid, "ts": ts, "temp_f": 99.1}).encode()
    elif kind == "unknown_type":
        value = _json(rng.choice(("blood_pressure", "spo2", "Pulse")), pid, ts)
    elif kind == "temp_missing":
        value = _json("temperature", pid, ts)
    elif kind == "temp_not_number":
        value = _json("temperature", pid, ts, temp_f=rng.choice(("101.2", None, "high")))
    else:  # pragma: no cover - MALFORMED_KINDS is closed
        raise ValueError(f"unknown malformed kind {kind!r}")
    return GeneratedRecord(key, value, ts, malformed=kind)


def main(argv: Sequence[str] | None = None) -> int:
    """Produce patient_monitoring events to Kafka; the exit code."""
    parser = command.generator_parser(
        "statekeeper generate --app patient-monitoring",
        "pulses, temperatures and checkouts for patient_monitoring, with late and malformed "
        "records",
        topic=DEFAULT_TOPIC,
        malformed=0.005,
    )
    parser.add_argument(
        "--patients", type=command.positive_int, default=50, help="patients (default: 50)"
    )
    parser.add_argument(
        "--minutes",
        type=command.positive_float,
        default=30.0,
        help="simulated event-time duration, minutes (default: 30)",
    )
    parser.add_argument(
        "--late-share",
        type=command.share,
        default=0.01,
        help="share of pulses/temperatures delivered late, half within the 5 s grace and "
        "half beyond (default: 0.01)",
    )
    parser.add_argument(
        "--checkout-share",
        type=command.share,
        default=0.2,
        help="share of patients who check out; half of them are re-admitted (default: 0.2)",
    )
    args = parser.parse_args(argv)
    first_ms = command.start_ms(args, int(args.minutes * _MINUTE))
    records = patient_events(
        args.patients,
        args.minutes,
        seed=args.seed,
        start_ms=first_ms,
        malformed_share=args.malformed_share,
        late_share=args.late_share,
        checkout_share=args.checkout_share,
    )
    return command.produce_command(args, "patient-monitoring", records, len(records), first_ms)


if __name__ == "__main__":
    raise SystemExit(main())
