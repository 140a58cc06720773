"""The stream source plans each batch under the driver's limit file, never past its ceiling."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from statekeeper.spark.batch_limit import read_batch_limit, write_batch_limit
from statekeeper.spark.kafka_source import KafkaStreamReader
from statekeeper.spark.offset_planning import parse_source_options


def _reader(tmp_path: Path, **extra: str) -> KafkaStreamReader:
    options = {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "a", **extra}
    return KafkaStreamReader(parse_source_options(options, streaming=True))


def test_the_limit_file_round_trips_and_bad_content_reads_as_none(tmp_path: Path) -> None:
    path = tmp_path / "batch-limit.json"
    assert read_batch_limit(path) is None
    write_batch_limit(path, 1234)
    assert read_batch_limit(path) == 1234
    for text in ("{oops", '{"records": 0}', '{"records": "5"}', "[]"):
        path.write_text(text)
        assert read_batch_limit(path) is None


def test_the_source_takes_the_lower_of_the_file_and_its_ceiling(tmp_path: Path) -> None:
    path = tmp_path / "batch-limit.json"
    reader = _reader(tmp_path, maxRecordsPerBatch="1000", batchLimitFile=str(path))
    assert reader._max_rows(ReadMaxRows(1000)) == 1000  # no file yet: the ceiling
    write_batch_limit(path, 300)
    assert reader._max_rows(ReadMaxRows(1000)) == 300
    assert reader._max_rows(None) == 300
    write_batch_limit(path, 5000)
    assert reader._max_rows(ReadMaxRows(1000)) == 1000
    assert reader._max_rows(ReadAllAvailable()) is None  # Trigger.Once reads everything


def test_without_the_option_the_file_is_not_read(tmp_path: Path) -> None:
    reader = _reader(tmp_path, maxRecordsPerBatch="1000")
    assert reader._max_rows(ReadMaxRows(700)) == 700
