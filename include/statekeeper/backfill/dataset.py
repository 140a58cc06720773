"""A dataset of historical source records: what ``statekeeper backfill --input PATH`` reads.

The dataset holds records as the app's source topics held them, one row per record, in a
Parquet file or directory, or newline-delimited JSON (``.json``/``.jsonl``/``.ndjson``, a
file or a directory of them):

============  ==========================  =====================================================
column        type                        meaning
============  ==========================  =====================================================
key           bytes, string or null       the record key as the topic held it (strings: UTF-8)
value         bytes, string or null       the record value as the topic held it
topic         string (optional)           the source topic; needed when the app has several
partition     int (optional)              the source partition; default: the key's murmur2
                                          partition, as the default producer places it
offset        int (optional)              the record's offset: records are processed in
                                          offset order and the stream takes over after the
                                          highest; without it, in dataset order, and the
                                          stream takes over at the log start
timestamp     int (epoch ms) or timestamp the record time (event time for windows); needed
                                          when the app has window stores; default 0
============  ==========================  =====================================================

Other columns are ignored (named in the report). A value that is neither bytes nor a string
(a JSON object in a JSON file) is refused: the dataset must hold the bytes the topic held,
so the app's own serdes read them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

from statekeeper.errors import ConfigError
from statekeeper.kafka.model import KafkaRecord
from statekeeper.kafka.partitioning import partition_for_key

DOCS = "docs/changing-apps.md#backfilling-from-a-dataset"
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
JSON_SUFFIXES = (".json", ".jsonl", ".ndjson")


class DatasetError(ConfigError):
    """A dataset that cannot be read as source records; the message names the file, the
    column or the row."""


@dataclass(frozen=True)
class DatasetShape:
    """What the dataset holds, from its schema: the format, which optional columns it has
    and the columns it ignores."""

    path: str
    format: str  # "parquet" | "json"
    has_topic: bool
    has_partition: bool
    has_offset: bool
    has_timestamp: bool
    ignored: tuple[str, ...] = ()


@dataclass(frozen=True)
class Routing:
    """How a row becomes a record of one source partition: the app's source topics and
    their partition counts."""

    partitions: dict[str, int]  # source topic -> partitions

    def record(self, row: dict[str, Any], position: int) -> KafkaRecord:
        """The row as a record of its source partition; ``position``: its place in the
        dataset, the offset when the row has none."""
        topic = row.get("topic")
        if topic is None:
            if len(self.partitions) != 1:
                raise DatasetError(
                    f"row {position}: no topic, and the app reads {sorted(self.partitions)}: "
                    f"give a topic column ({DOCS})"
                )
            topic = next(iter(self.partitions))
        count = self.partitions.get(topic)
        if count is None:
            raise DatasetError(
                f"row {position}: topic {topic!r} is not a source of the app "
                f"({sorted(self.partitions)})"
            )
        key, value = (
            _bytes(row.get("key"), "key", position),
            _bytes(row.get("value"), "value", position),
        )
        partition = row.get("partition")
        if partition is None:
            partition = partition_for_key(key, count) if key is not None else 0
        elif not 0 <= int(partition) < count:
            raise DatasetError(
                f"row {position}: partition {partition} of {topic} (the topic has {count})"
            )
        offset = row.get("offset")
        return KafkaRecord(
            topic,
            int(partition),
            position if offset is None else int(offset),
            _millis(row.get("timestamp")),
            key,
            value,
        )


def dataset_format(path: Path) -> str:
    """``parquet`` or ``json`` by the path's name (a directory: by its files)."""
    if not path.exists():
        raise DatasetError(f"--input {path}: no such file or directory")
    names = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    names = [p for p in names if not p.name.startswith((".", "_"))]
    if names and all(p.suffix == ".parquet" for p in names):
        return "parquet"
    if names and all(p.suffix in JSON_SUFFIXES for p in names):
        return "json"
    raise DatasetError(
        f"--input {path}: expected Parquet (.parquet) or newline-delimited JSON "
        f"({', '.join(JSON_SUFFIXES)}) files, found {[p.name for p in names[:5]] or 'none'}"
    )


def shape_of(path: Path, fmt: str, names: list[str], kinds: dict[str, str]) -> DatasetShape:
    """Check a schema (column ``names``; ``kinds``: column -> ``binary``, ``string``, ``int``,
    ``timestamp``, ``null`` or anything else) and say what it holds."""
    for required in ("key", "value"):
        if required not in names:
            raise DatasetError(f"--input {path}: no {required!r} column (has {names}; {DOCS})")
    allowed = {
        "key": {"binary", "string", "null"},
        "value": {"binary", "string", "null"},
        "topic": {"string"},
        "partition": {"int"},
        "offset": {"int"},
        "timestamp": {"int", "timestamp"},
    }
    for column, kinds_ok in allowed.items():
        if column in names and kinds.get(column) not in kinds_ok:
            raise DatasetError(
                f"--input {path}: column {column!r} is {kinds.get(column)}, expected "
                f"{' or '.join(sorted(kinds_ok))} ({DOCS})"
            )
    return DatasetShape(
        str(path),
        fmt,
        has_topic="topic" in names,
        has_partition="partition" in names,
        has_offset="offset" in names,
        has_timestamp="timestamp" in names,
        ignored=tuple(n for n in names if n not in COLUMNS),
    )


def read_local(path: Path) -> tuple[DatasetShape, Iterator[dict[str, Any]]]:
    """The dataset's shape and its rows in dataset order, read in this process (pyarrow)."""
    import pyarrow as pa

    fmt = dataset_format(path)
    files = (
        [path]
        if path.is_file()
        else sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))
    )
    tables = [_read_table(f, fmt) for f in files]
    table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    kinds = {f.name: _arrow_kind(f.type) for f in table.schema}
    shape = shape_of(path, fmt, list(table.schema.names), kinds)
    wanted = [c for c in COLUMNS if c in table.schema.names]
    return shape, _rows(table.select(wanted))


def _read_table(file: Path, fmt: str) -> Any:
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return pq.read_table(file)
        import pyarrow.json as pj

        return pj.read_json(file)
    except Exception as exc:  # pyarrow's errors are its own types
        raise DatasetError(f"--input {file}: cannot be read as {fmt}: {exc}") from exc


def _rows(table: Any) -> Iterator[dict[str, Any]]:
    for batch in table.to_batches(max_chunksize=65_536):
        yield from batch.to_pylist()


def _arrow_kind(kind: Any) -> str:
    import pyarrow.types as t

    if t.is_binary(kind) or t.is_large_binary(kind) or t.is_fixed_size_binary(kind):
        return "binary"
    if t.is_string(kind) or t.is_large_string(kind):
        return "string"
    if t.is_integer(kind):
        return "int"
    if t.is_timestamp(kind):
        return "timestamp"
    if t.is_null(kind):
        return "null"
    return str(kind)


def _bytes(data: Any, column: str, position: int) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    raise DatasetError(
        f"row {position}: {column} is {type(data).__name__} ({json.dumps(data, default=str)[:60]}),"
        f" not bytes or a string: the dataset holds the bytes the topic held ({DOCS})"
    )


def _millis(ts: Any) -> int:
    if ts is None:
        return 0
    if isinstance(ts, int):
        return ts
    if ts.tzinfo is None:  # a timestamp column without a zone: UTC, as Parquet means it
        ts = ts.replace(tzinfo=UTC)
    return int(ts.timestamp() * 1000)
