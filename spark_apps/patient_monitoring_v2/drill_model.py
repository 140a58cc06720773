"""What ``statekeeper drill --spark`` checks patient_monitoring v2's stores with: v1's
PySpark SQL recomputation (:mod:`spark_apps.patient_monitoring.reference_spark`) over the
whole input, with v2's heart-rate entries.

What is checkable. v2's state usually began as v1's, migrated, and the recomputation reads
the whole input, which v1 and v2 processed together:

- ``pulse-counts`` (copied by the migration, then counted on by v2): exactly v1's windows;
- ``heart-rate``: v1's table with each entry's ``window_end`` (``window_start + 60000``),
  which the migration adds to v1's entries and v2 writes itself;
- ``temperature-peaks`` is not modelled: it is new in v2 and started empty at the takeover,
  so what it holds depends on where v2 took over, which a recomputation over the whole input
  does not see (``reference.recompute(..., upgraded_at=...)`` models it in tests).

Like v1's model it covers the default windows (60 s tumbling, 5 s grace) only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from statekeeper.app.app_files import import_app_file
from statekeeper.kafka.model import KafkaRecord
from statekeeper.ops.drill.spark_check import SparkStoreModel
from statekeeper.recompute.spark_frames import records_to_dataframe

from .topology import HEART_RATE_STORE, PULSE_STORE

#: v1's folder beside this one (the shipped layout): its models, imported by path as the
#: spec's files are (this file is imported as a module of its own folder).
V1 = Path(__file__).resolve().parents[1] / "patient_monitoring"


def heart_rate_entry(entry: dict[str, int], window_ms: int) -> dict[str, int]:
    """A v1 heart-rate entry as v2 holds it (with its window's end)."""
    return {**entry, "window_end": entry["window_start"] + window_ms}


def spark_models(params: dict[str, Any]) -> list[SparkStoreModel]:
    """Models for a patient_monitoring v2 app built with ``params``; none when its windows
    differ from the ones the recomputation models."""
    v1 = import_app_file(V1 / "reference.py")
    reference_spark = import_app_file(V1 / "reference_spark.py")
    windows = (params.get("window_ms", v1.WINDOW_MS), params.get("grace_ms", v1.GRACE_MS))
    if windows != (v1.WINDOW_MS, v1.GRACE_MS):
        return []
    retention = int(params.get("retention_ms", v1.RETENTION_MS))
    inputs = (params.get("input_topic", "patient-events"),)
    last: list[Any] = []  # (records, result) of the last recomputation: both models share it

    def recompute(spark: Any, records: list[KafkaRecord]) -> Any:
        if not last or last[0] is not records:
            frame = records_to_dataframe(spark, records)
            last[:] = [records, reference_spark.recompute(frame, retention)]
        return last[1]

    def pulse_windows(spark: Any, records: list[KafkaRecord]) -> dict[Any, int]:
        return recompute(spark, records).pulse_windows

    def heart_rate(spark: Any, records: list[KafkaRecord]) -> dict[str, Any]:
        table = recompute(spark, records).heart_rate
        return {p: heart_rate_entry(e, v1.WINDOW_MS) for p, e in table.items()}

    return [
        SparkStoreModel(PULSE_STORE, inputs, pulse_windows, "PySpark SQL pulse windows"),
        SparkStoreModel(
            HEART_RATE_STORE, inputs, heart_rate, "PySpark SQL heart-rate table (v2 entries)"
        ),
    ]
