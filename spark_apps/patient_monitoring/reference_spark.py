"""Spark batch recomputation of patient_monitoring, for the demo, tests and drills.

Reads a DataFrame of the input topic with the JVM Kafka source's columns (the
``statekeeper_kafka`` data source, or
:func:`~statekeeper.recompute.spark_frames.records_to_dataframe`).
Everything is computed with DataFrame operations and agrees with the plain-Python model
:mod:`spark_apps.patient_monitoring.reference` (tests check that):

- a task's stream time before a record is a running max over its partition in offset
  order: ``max(ts) over (partition by topic, partition order by offset rows between
  unbounded preceding and 1 preceding)`` on the valid records;
- a checkout splits a patient's records into epochs; only windows of the last epoch stay
  in ``pulse-counts``;
- a window is emitted at the first record whose stream time reaches its end + grace,
  unless a checkout of the patient comes first (at or before that record);
- a temperature sees the latest emission or checkout of its patient strictly before it.

pyspark is imported lazily: this module is only imported where Spark runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from statekeeper.recompute.spark_frames import value_text

from . import reference

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_TP = ["topic", "partition"]


def classify_events(df: DataFrame) -> DataFrame:
    """Add ``reason`` (DLQ reason or null), ``patient``, ``type``, ``temp_f``, ``ts`` (ms)."""
    from pyspark.sql import functions as F

    text = value_text()
    # json_object_keys is null unless the value is a JSON object (and, unlike a map, it
    # never fails on duplicate keys).
    keys = F.json_object_keys(text)
    event = F.from_json(text, "struct<type: string, temp_f: double>")
    parsed = df.withColumns(
        {
            "_utf8": F.is_valid_utf8(text),
            "_keys": keys,
            "_event": event,
        }
    )
    kind = F.col("_event.type")
    reason = (
        F.when(F.col("key").isNull(), F.lit(reference.DLQ_NULL_KEY))
        .when(
            F.col("value").isNull() | ~F.col("_utf8") | F.col("_keys").isNull(),
            F.lit(reference.DLQ_NOT_JSON_OBJECT),
        )
        .when(~F.array_contains("_keys", F.lit("type")), F.lit(reference.DLQ_MISSING_TYPE))
        .when(kind.isNull() | ~kind.isin(*reference.EVENT_TYPES), F.lit(reference.DLQ_UNKNOWN_TYPE))
        .when(
            (kind == "temperature") & F.col("_event.temp_f").isNull(),
            F.lit(reference.DLQ_BAD_TEMPERATURE),
        )
        .otherwise(F.lit(None).cast("string"))
    )
    return parsed.select(
        *_TP,
        "offset",
        reason.alias("reason"),
        F.col("key").cast("string").alias("patient"),
        kind.alias("type"),
        F.col("_event.temp_f").alias("temp_f"),
        F.unix_millis("timestamp").alias("ts"),
    )


def frames(df: DataFrame, retention_ms: int = reference.RETENTION_MS) -> dict[str, DataFrame]:
    """The patient app's expected results as DataFrames (see the module docstring).

    Keys: ``classified`` (every input record with its DLQ reason; cached), ``dlq``,
    ``pulses`` (with ``late``), ``pulse_windows`` (patient, window_start, count: the store
    after checkouts and retention), ``expired_windows``, ``emissions`` (topic, partition,
    patient, offset, window_start, bpm), ``checkouts``, ``heart_rate``, ``alerts``,
    ``stream_time``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    classified = classify_events(df).cache()
    dlq = classified.where(F.col("reason").isNotNull()).select(*_TP, "offset", "reason")
    valid = classified.where(F.col("reason").isNull()).drop("reason")

    by_offset = Window.partitionBy(*_TP).orderBy("offset")
    patient_order = Window.partitionBy(*_TP, "patient").orderBy("offset")
    is_checkout = (F.col("type") == "checkout").cast("int")
    events = valid.withColumns(
        {
            "prior": F.max("ts").over(by_offset.rowsBetween(Window.unboundedPreceding, -1)),
            "st": F.max("ts").over(by_offset.rowsBetween(Window.unboundedPreceding, 0)),
            # checkouts of this patient before this record (in this task)
            "epoch": F.coalesce(
                F.sum(is_checkout).over(patient_order.rowsBetween(Window.unboundedPreceding, -1)),
                F.lit(0),
            ),
        }
    ).cache()

    close_ms = reference.WINDOW_MS + reference.GRACE_MS
    pulses = (
        events.where(F.col("type") == "pulse")
        .withColumn("window_start", F.col("ts") - F.pmod(F.col("ts"), F.lit(reference.WINDOW_MS)))
        .withColumn(
            "late",
            F.col("prior").isNotNull() & (F.col("window_start") + close_ms <= F.col("prior")),
        )
    )
    counted = pulses.where(~F.col("late"))
    checkouts = events.where(F.col("type") == "checkout").select(*_TP, "patient", "offset", "epoch")
    final_epoch = checkouts.groupBy(*_TP, "patient").agg(F.count(F.lit(1)).alias("final_epoch"))
    # Retention: the store hides windows older than its newest window start - retention + 1.
    floors = counted.groupBy(*_TP).agg((F.max("window_start") - retention_ms + 1).alias("floor"))
    store = (
        counted.join(final_epoch, [*_TP, "patient"], "left")
        .where(F.col("epoch") == F.coalesce(F.col("final_epoch"), F.lit(0)))
        .join(floors, _TP)
    )
    pulse_windows = (
        store.where(F.col("window_start") >= F.col("floor"))
        .groupBy("patient", "window_start")
        .count()
    )
    expired = (
        store.where(F.col("window_start") < F.col("floor"))
        .select("patient", "window_start")
        .distinct()
    )

    # Suppression: a window (per epoch) is emitted at the first record whose stream time
    # closes it. `closes` = the largest window start a record's stream time closes; the first
    # record with closes >= window_start is found by ordering windows among closing points.
    windows = counted.groupBy(*_TP, "patient", "epoch", "window_start").agg(
        F.count(F.lit(1)).alias("bpm")
    )
    closing = (
        events.withColumn(
            "closes",
            F.floor((F.col("st") - close_ms) / reference.WINDOW_MS) * reference.WINDOW_MS,
        )
        .groupBy(*_TP, "closes")
        .agg(F.min("offset").alias("closed_at"))
    )
    points = windows.select(
        *_TP,
        "patient",
        "epoch",
        "bpm",
        F.col("window_start").alias("at"),
        F.lit(0).alias("kind"),
        F.lit(None).cast("long").alias("closed_at"),
    ).unionByName(
        closing.select(
            *_TP,
            F.lit(None).cast("string").alias("patient"),
            F.lit(None).cast("long").alias("epoch"),
            F.lit(None).cast("long").alias("bpm"),
            F.col("closes").cast("long").alias("at"),
            F.lit(1).alias("kind"),
            "closed_at",
        )
    )
    ahead = (
        Window.partitionBy(*_TP)
        .orderBy("at", "kind")
        .rowsBetween(Window.currentRow, Window.unboundedFollowing)
    )
    next_checkout = checkouts.select(
        *_TP, "patient", "epoch", F.col("offset").alias("checkout_offset")
    )
    emissions = (
        points.withColumn("emitted_at", F.first("closed_at", ignorenulls=True).over(ahead))
        .where((F.col("kind") == 0) & F.col("emitted_at").isNotNull())
        .join(next_checkout, [*_TP, "patient", "epoch"], "left")
        .where(F.col("checkout_offset").isNull() | (F.col("checkout_offset") > F.col("emitted_at")))
        .select(
            *_TP,
            "patient",
            F.col("emitted_at").alias("offset"),
            F.col("at").alias("window_start"),
            "bpm",
        )
    ).cache()

    # The heart-rate table as it stands before each record; temperatures look it up.
    state = F.struct(F.col("bpm").alias("bpm"), F.col("window_start").alias("window_start"))
    timeline = (
        emissions.select(
            *_TP,
            "patient",
            "offset",
            F.lit(1).alias("kind"),
            "window_start",
            state.alias("state"),
            F.lit(None).cast("double").alias("temp_f"),
            F.lit(None).cast("long").alias("ts"),
        )
        .unionByName(
            checkouts.select(
                *_TP,
                "patient",
                "offset",
                F.lit(0).alias("kind"),
                F.lit(0).cast("long").alias("window_start"),
                F.struct(
                    F.lit(None).cast("long").alias("bpm"),
                    F.lit(None).cast("long").alias("window_start"),
                ).alias("state"),
                F.lit(None).cast("double").alias("temp_f"),
                F.lit(None).cast("long").alias("ts"),
            )
        )
        .unionByName(
            events.where(
                (F.col("type") == "temperature") & (F.col("temp_f") > reference.TEMP_THRESHOLD_F)
            ).select(
                *_TP,
                "patient",
                "offset",
                F.lit(0).alias("kind"),
                F.lit(0).cast("long").alias("window_start"),
                F.lit(None).cast("struct<bpm: bigint, window_start: bigint>").alias("state"),
                "temp_f",
                "ts",
            )
        )
    )
    before = (
        Window.partitionBy(*_TP, "patient")
        .orderBy("offset", "kind", "window_start")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    alerts = (
        timeline.where(F.col("temp_f").isNotNull() | F.col("state").isNotNull())
        .withColumn("seen", F.last("state", ignorenulls=True).over(before))
        .where(F.col("temp_f").isNotNull() & (F.col("seen.bpm") > reference.BPM_THRESHOLD))
        .select(
            *_TP,
            "offset",
            F.col("patient").alias("patient_id"),
            F.col("seen.bpm").alias("bpm"),
            F.col("seen.window_start").alias("window_start"),
            "temp_f",
            "ts",
        )
    )
    last_checkout = checkouts.groupBy(*_TP, "patient").agg(F.max("offset").alias("last_checkout"))
    latest = Window.partitionBy(*_TP, "patient").orderBy(
        F.col("offset").desc(), F.col("window_start").desc()
    )
    heart_rate = (
        emissions.join(last_checkout, [*_TP, "patient"], "left")
        .where(F.col("last_checkout").isNull() | (F.col("offset") > F.col("last_checkout")))
        .withColumn("rank", F.row_number().over(latest))
        .where(F.col("rank") == 1)
        .select(*_TP, "patient", "bpm", "window_start")
    )
    stream_time = valid.groupBy(*_TP).agg(F.max("ts").alias("stream_time"))
    return {
        "classified": classified,
        "dlq": dlq,
        "pulses": pulses,
        "pulse_windows": pulse_windows,
        "expired_windows": expired,
        "emissions": emissions,
        "checkouts": checkouts,
        "heart_rate": heart_rate,
        "alerts": alerts,
        "stream_time": stream_time,
    }


def recompute(df: DataFrame, retention_ms: int = reference.RETENTION_MS) -> reference.PatientResult:
    """:func:`frames`, collected into a :class:`PatientResult` (small results only)."""
    from pyspark.sql import functions as F

    computed = frames(df, retention_ms)
    result = reference.PatientResult()
    result.records = computed["classified"].count()
    for row in computed["dlq"].orderBy(*_TP, "offset").collect():
        position = (row["topic"], int(row["partition"]), int(row["offset"]))
        result.dlq.append(position)
        result.dlq_reasons[position] = row["reason"]
    result.late_dropped = computed["pulses"].where(F.col("late")).count()
    result.pulse_windows = {
        (row["patient"], int(row["window_start"])): int(row["count"])
        for row in computed["pulse_windows"].collect()
    }
    result.windows_expired = computed["expired_windows"].count()
    for row in computed["heart_rate"].orderBy(*_TP, "patient").collect():
        result.heart_rate[row["patient"]] = {
            "bpm": int(row["bpm"]),
            "window_start": int(row["window_start"]),
        }
    for row in computed["alerts"].orderBy(*_TP, "offset").collect():
        result.alerts.append(
            {
                "patient_id": row["patient_id"],
                "bpm": int(row["bpm"]),
                "window_start": int(row["window_start"]),
                "temp_f": row["temp_f"],
                "ts": int(row["ts"]),
            }
        )
    outputs = (
        computed["emissions"]
        .select(*_TP, "offset", F.lit(1).alias("kind"), "window_start", "patient", "bpm")
        .unionByName(
            computed["checkouts"].select(
                *_TP,
                "offset",
                F.lit(0).alias("kind"),
                F.lit(0).cast("long").alias("window_start"),
                "patient",
                F.lit(None).cast("long").alias("bpm"),
            )
        )
        .orderBy(*_TP, "offset", "kind", "window_start", "patient")
    )
    for row in outputs.collect():
        value = None
        if row["kind"] == 1:
            value = {"bpm": int(row["bpm"]), "window_start": int(row["window_start"])}
        result.heart_rate_outputs.append((row["patient"], value))
    for row in computed["stream_time"].collect():
        result.stream_time[(row["topic"], int(row["partition"]))] = int(row["stream_time"])
    return result
