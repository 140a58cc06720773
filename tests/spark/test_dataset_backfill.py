"""``statekeeper backfill --input PATH``: a fresh app's state from a dataset of historical
records, then the stream takes over after it.

word_count (two subtopologies: the words are re-keyed through a repartition topic, which
the dataset fill routes in memory) over real files, a real broker and Spark local[2]:

- a Parquet export of the topic's first records with their offsets (on Spark): the stream
  takes over after the dataset's highest offset per partition; the final counts equal the
  recomputation of the whole topic, each record counted once;
- history the topic no longer holds, as newline-delimited JSON without offsets (--local):
  the stream takes over at the log start; the final counts are the dataset's plus the
  topic's;
- what is refused before anything is written: a dataset past the topic's end, a row of
  another partition (read on Spark: still one line), an app that is not fresh, a value that
  is not bytes or a string.
"""

from __future__ import annotations

import json
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spark_apps.word_count.generator import word_count_lines
from spark_apps.word_count.reference import recompute
from statekeeper.app.store_reader import read_store
from statekeeper.generate.producer import produce
from statekeeper.kafka.model import KafkaRecord
from statekeeper.kafka.topic_reader import read_topic
from statekeeper.versions.recorded import state_root
from statekeeper.versions.takeover import read_takeover, takeover_path
from tests.spark.test_backfill import _app, _backfill, _latest_outputs

pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("backfill_spark")]

PARTITIONS = 4


def test_a_parquet_export_with_offsets_then_the_stream(spark, broker, tmp_path, capsys) -> None:
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    topic, out = f"ds-lines-{suffix}", f"ds-counts-{suffix}"
    lines = list(word_count_lines(6_000, seed=11))
    produce(bootstrap, topic, lines, partitions=PARTITIONS)
    records = read_topic(bootstrap, topic)
    # The export: each partition's first two thirds, a repeated row, in a shuffled order.
    exported = [r for rs in records.values() for r in rs[: 2 * len(rs) // 3]]
    exported = exported[1::2] + exported[::2] + exported[:1]
    dataset = tmp_path / "export"
    dataset.mkdir()
    half = len(exported) // 2
    for n, part in enumerate((exported[:half], exported[half:])):
        pq.write_table(
            pa.table(
                {
                    "key": pa.array([r.key for r in part], pa.binary()),
                    "value": pa.array([r.value for r in part], pa.binary()),
                    "topic": [r.topic for r in part],
                    "partition": [r.partition for r in part],
                    "offset": [r.offset for r in part],
                    "timestamp": [r.timestamp_ms for r in part],
                    "exported_by": ["test"] * len(part),
                }
            ),
            dataset / f"part-{n}.parquet",
        )
    app = _app(bootstrap, tmp_path / "wc", topic, out)
    topology = app.spec.build_topology()

    code, report, err = _backfill(app, capsys, "--input", str(dataset))
    assert code == 0, err
    print(json.dumps(report)[:2000])
    assert report["on_spark"] is True and report["records"] == len(exported)
    takeover = {tp: o for tp, o in report["takeover_offsets"].items()}
    assert takeover == {f"{topic}:{p}": 2 * len(rs) // 3 for p, rs in records.items()}
    assert sum(t["duplicates"] for t in report["tasks"]) == 1
    assert "columns not read: exported_by" in err
    below = {p: [r for r in rs if r.offset < takeover[f"{topic}:{p}"]] for p, rs in records.items()}
    assert read_store(app.settings, topology, "word-counts", PARTITIONS) == recompute(below).counts
    assert _latest_outputs(bootstrap, out) == {}  # the history's outputs are not made again
    root = state_root(app.settings.state_dir, app.app_id)
    record = read_takeover(takeover_path(root))
    assert record is not None and record.batch_base == 1 and "pending" not in record.extra

    # The stream takes over after the dataset: every record once.
    code, report, err = _backfill(app, capsys)
    assert code == 0, err
    assert "starts where the version it took over from stopped" in report["start"]
    expected = recompute(records).counts
    assert read_store(app.settings, topology, "word-counts", PARTITIONS) == expected
    latest = _latest_outputs(bootstrap, out)
    assert latest and latest == {w: expected[w] for w in latest}

    # Not fresh any more: refused, nothing written.
    code, _, err = _backfill(app, capsys, "--input", str(dataset), "--local")
    assert code != 0 and "is not fresh" in err


def test_history_the_topic_no_longer_holds_from_json_then_the_stream(
    broker, tmp_path, capsys
) -> None:
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    topic, out = f"ds-json-{suffix}", f"ds-json-counts-{suffix}"
    old = [r for r in word_count_lines(3_000, seed=5) if r.value is None or _utf8(r.value)]
    new = list(word_count_lines(1_000, seed=6))
    produce(bootstrap, topic, new, partitions=PARTITIONS)
    dataset = tmp_path / "history.ndjson"
    rows = [{"key": None, "value": _utf8(r.value), "timestamp": r.timestamp_ms} for r in old]
    dataset.write_text("".join(json.dumps(row) + "\n" for row in rows))
    app = _app(bootstrap, tmp_path / "wc", topic, out)
    topology = app.spec.build_topology()

    bad = tmp_path / "objects.jsonl"
    bad.write_text(json.dumps({"key": "k", "value": {"line": "a b"}}) + "\n")
    code, _, err = _backfill(app, capsys, "--input", str(bad), "--local")
    assert code != 0 and "column 'value' is struct<line: string>, expected binary" in err
    assert not state_root(app.settings.state_dir, app.app_id).exists()

    code, report, err = _backfill(app, capsys, "--input", str(dataset), "--local")
    assert code == 0, err
    assert report["on_spark"] is False and report["records"] == len(old)
    assert set(report["takeover_offsets"].values()) == {0}  # the log start
    assert "no offset column" in err and "no timestamp column" not in err
    history = [KafkaRecord("dataset", 0, n, 0, None, r.value) for n, r in enumerate(old)]
    assert (
        read_store(app.settings, topology, "word-counts", PARTITIONS) == recompute(history).counts
    )

    code, report, err = _backfill(app, capsys)
    assert code == 0, err
    both = history + [r for rs in read_topic(bootstrap, topic).values() for r in rs]
    assert read_store(app.settings, topology, "word-counts", PARTITIONS) == recompute(both).counts


def _utf8(data: bytes | None) -> str | None:
    try:
        return None if data is None else data.decode()
    except UnicodeDecodeError:
        return None


def test_a_dataset_past_the_log_end_or_with_a_bad_row_is_refused(
    spark, broker, tmp_path, capsys
) -> None:
    bootstrap = broker.bootstrap_servers
    suffix = uuid.uuid4().hex[:6]
    topic = f"ds-gap-{suffix}"
    produce(bootstrap, topic, list(word_count_lines(400, seed=3)), partitions=PARTITIONS)
    app = _app(bootstrap, tmp_path / "wc", topic, f"ds-gap-out-{suffix}")
    dataset = tmp_path / "far.parquet"
    pq.write_table(
        pa.table({"key": [None], "value": ["a b"], "partition": [0], "offset": [10_000]}),
        dataset,
    )
    code, _, err = _backfill(app, capsys, "--input", str(dataset), "--local")
    assert code != 0 and "has offset 10000 in the dataset but the topic ends at" in err
    bad_row = tmp_path / "bad_row.parquet"
    pq.write_table(pa.table({"key": ["a", "b"], "value": ["x", "y"], "partition": [0, 9]}), bad_row)
    code, _, err = _backfill(app, capsys, "--input", str(bad_row))  # read on Spark
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"partition 9 of {topic} (the topic has {PARTITIONS})" in err
    assert not state_root(app.settings.state_dir, app.app_id).exists()
