"""What ``statekeeper drill --spark`` checks patient_monitoring's stores with: the PySpark SQL
recomputation of :mod:`spark_apps.patient_monitoring.reference_spark`, whose pulse windows
map onto the window store ``pulse-counts`` ((patient, window start) -> count) and whose
heart-rate table onto ``heart-rate`` (patient -> {"bpm", "window_start"}).

The recomputation models the app's default windows (60 s tumbling, 5 s grace): an app built
with other windows gets no model (``drill --spark`` then says so)."""

from __future__ import annotations

from typing import Any

from statekeeper.kafka.model import KafkaRecord
from statekeeper.ops.drill.spark_check import SparkStoreModel
from statekeeper.recompute.spark_frames import records_to_dataframe

from . import reference, reference_spark
from .topology import HEART_RATE_STORE, PULSE_STORE


def spark_models(params: dict[str, Any]) -> list[SparkStoreModel]:
    """Models for a patient_monitoring app built with ``params`` (the spec's topology
    params); none when its windows differ from the ones the recomputation models."""
    if (
        params.get("window_ms", reference.WINDOW_MS),
        params.get("grace_ms", reference.GRACE_MS),
    ) != (
        reference.WINDOW_MS,
        reference.GRACE_MS,
    ):
        return []
    retention = int(params.get("retention_ms", reference.RETENTION_MS))
    inputs = (params.get("input_topic", "patient-events"),)

    last: list[Any] = []  # (records, result) of the last recomputation: both models share it

    def recompute(spark: Any, records: list[KafkaRecord]) -> reference.PatientResult:
        if not last or last[0] is not records:
            frame = records_to_dataframe(spark, records)
            last[:] = [records, reference_spark.recompute(frame, retention)]
        return last[1]

    def pulse_windows(spark: Any, records: list[KafkaRecord]) -> dict[Any, int]:
        return recompute(spark, records).pulse_windows

    def heart_rate(spark: Any, records: list[KafkaRecord]) -> dict[str, Any]:
        return recompute(spark, records).heart_rate

    return [
        SparkStoreModel(PULSE_STORE, inputs, pulse_windows, "PySpark SQL pulse windows"),
        SparkStoreModel(HEART_RATE_STORE, inputs, heart_rate, "PySpark SQL heart-rate table"),
    ]
