"""Spark batch recomputation of the example apps, for the demo and restore drills.

Input is a DataFrame with the columns of Spark's JVM Kafka source (``key`` binary, ``value``
binary, ``topic``, ``partition``, ``offset``, ``timestamp``, ...), as the
``statekeeper_kafka`` data source reads it. Everything is computed with DataFrame
operations and agrees with the plain-Python models in this package (tests check that):

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

from typing import TYPE_CHECKING, Any

from statekeeper.recompute import patient_monitoring as pm
from statekeeper.recompute import word_count as wc
from statekeeper.recompute.grouping import RecordsInput, by_task

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

#: Schema of Spark's JVM Kafka source (and of the ``statekeeper_kafka`` data source).
KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int, headers array<struct<key: string, value: binary>>"
)

_TP = ["topic", "partition"]


def records_to_dataframe(spark: SparkSession, records: RecordsInput) -> DataFrame:
    """A DataFrame with the JVM Kafka source's schema holding ``records`` (for tests/drills)."""
    from pyspark.sql import functions as F

    rows: list[tuple[Any, ...]] = [
        (
            r.key,
            r.value,
            r.topic,
            r.partition,
            r.offset,
            r.timestamp_ms,
            0,
            [(k, v) for k, v in r.headers],
        )
        for _, task in by_task(records)
        for r in task
    ]
    raw = spark.createDataFrame(
        rows,
        "key binary, value binary, topic string, partition int, offset long, ts long, "
        "timestampType int, headers array<struct<key: string, value: binary>>",
    )
    return raw.select(
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        F.timestamp_millis("ts").alias("timestamp"),
        "timestampType",
        "headers",
    )


def _text() -> Column:
    from pyspark.sql import functions as F

    return F.col("value").cast("string")


# --- word_count ---------------------------------------------------------------------------


def word_count_frames(df: DataFrame) -> tuple[DataFrame, DataFrame]:
    """``(counts[word, count], dlq[topic, partition, offset, reason])`` of the lines topic."""
    from pyspark.sql import functions as F

    text = _text()
    reason = (
        F.when(F.col("value").isNull(), F.lit(wc.DLQ_NULL_VALUE))
        .when(~F.is_valid_utf8(text), F.lit(wc.DLQ_INVALID_UTF8))
        .otherwise(F.lit(None).cast("string"))
    )
    classified = df.withColumn("reason", reason)
    split = F.regexp_extract_all(F.lower(_text()), F.lit(wc.WORD_PATTERN.pattern), 0)
    words = classified.where(F.col("reason").isNull()).select(F.explode(split).alias("word"))
    counts = words.groupBy("word").count()
    dlq = classified.where(F.col("reason").isNotNull()).select(*_TP, "offset", "reason")
    return counts, dlq


def recompute_word_count(df: DataFrame) -> wc.WordCountResult:
    """:func:`word_count_frames`, collected into a :class:`WordCountResult`."""
    counts_df, dlq_df = word_count_frames(df)
    result = wc.WordCountResult()
    result.counts = {row["word"]: int(row["count"]) for row in counts_df.collect()}
    result.words = sum(result.counts.values())
    for row in dlq_df.orderBy(*_TP, "offset").collect():
        position = (row["topic"], int(row["partition"]), int(row["offset"]))
        result.dlq.append(position)
        result.dlq_reasons[position] = row["reason"]
    result.records = df.count()
    return result


# --- patient_monitoring -------------------------------------------------------------------


def classify_patient_events(df: DataFrame) -> DataFrame:
    """Add ``reason`` (DLQ reason or null), ``patient``, ``type``, ``temp_f``, ``ts`` (ms)."""
    from pyspark.sql import functions as F

    text = _text()
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
        F.when(F.col("key").isNull(), F.lit(pm.DLQ_NULL_KEY))
        .when(
            F.col("value").isNull() | ~F.col("_utf8") | F.col("_keys").isNull(),
            F.lit(pm.DLQ_NOT_JSON_OBJECT),
        )
        .when(~F.array_contains("_keys", F.lit("type")), F.lit(pm.DLQ_MISSING_TYPE))
        .when(kind.isNull() | ~kind.isin(*pm.EVENT_TYPES), F.lit(pm.DLQ_UNKNOWN_TYPE))
        .when(
            (kind == "temperature") & F.col("_event.temp_f").isNull(),
            F.lit(pm.DLQ_BAD_TEMPERATURE),
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


def patient_frames(df: DataFrame, retention_ms: int = pm.RETENTION_MS) -> dict[str, DataFrame]:
    """The patient app's expected results as DataFrames (see the module docstring).

    Keys: ``classified`` (every input record with its DLQ reason; cached), ``dlq``,
    ``pulses`` (with ``late``), ``pulse_windows`` (patient, window_start, count: the store
    after checkouts and retention), ``expired_windows``, ``emissions`` (topic, partition,
    patient, offset, window_start, bpm), ``checkouts``, ``heart_rate``, ``alerts``,
    ``stream_time``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    classified = classify_patient_events(df).cache()
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

    close_ms = pm.WINDOW_MS + pm.GRACE_MS
    pulses = (
        events.where(F.col("type") == "pulse")
        .withColumn("window_start", F.col("ts") - F.pmod(F.col("ts"), F.lit(pm.WINDOW_MS)))
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
            F.floor((F.col("st") - close_ms) / pm.WINDOW_MS) * pm.WINDOW_MS,
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
                (F.col("type") == "temperature") & (F.col("temp_f") > pm.TEMP_THRESHOLD_F)
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
        .where(F.col("temp_f").isNotNull() & (F.col("seen.bpm") > pm.BPM_THRESHOLD))
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


def recompute_patients(df: DataFrame, retention_ms: int = pm.RETENTION_MS) -> pm.PatientResult:
    """:func:`patient_frames`, collected into a :class:`PatientResult` (small results only)."""
    from pyspark.sql import functions as F

    frames = patient_frames(df, retention_ms)
    result = pm.PatientResult()
    result.records = frames["classified"].count()
    for row in frames["dlq"].orderBy(*_TP, "offset").collect():
        position = (row["topic"], int(row["partition"]), int(row["offset"]))
        result.dlq.append(position)
        result.dlq_reasons[position] = row["reason"]
    result.late_dropped = frames["pulses"].where(F.col("late")).count()
    result.pulse_windows = {
        (row["patient"], int(row["window_start"])): int(row["count"])
        for row in frames["pulse_windows"].collect()
    }
    result.windows_expired = frames["expired_windows"].count()
    for row in frames["heart_rate"].orderBy(*_TP, "patient").collect():
        result.heart_rate[row["patient"]] = {
            "bpm": int(row["bpm"]),
            "window_start": int(row["window_start"]),
        }
    for row in frames["alerts"].orderBy(*_TP, "offset").collect():
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
        frames["emissions"]
        .select(*_TP, "offset", F.lit(1).alias("kind"), "window_start", "patient", "bpm")
        .unionByName(
            frames["checkouts"].select(
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
    for row in frames["stream_time"].collect():
        result.stream_time[(row["topic"], int(row["partition"]))] = int(row["stream_time"])
    return result


def recompute_records(
    spark: SparkSession, app: str, records: RecordsInput
) -> wc.WordCountResult | pm.PatientResult:
    """Convenience for drills: build the DataFrame and recompute ``app`` (word_count or
    patient_monitoring)."""
    df = records_to_dataframe(spark, records)
    if app == "word_count":
        return recompute_word_count(df)
    if app == "patient_monitoring":
        return recompute_patients(df)
    raise ValueError(f"unknown app {app!r}: use word_count or patient_monitoring")
