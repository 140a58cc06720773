"""Column batches for the vectorised fast path: keys, values and the input record of each row.

A row's input record is ``records[src[i]]`` (``src`` None means row i came from record i).
Ops transform whole columns with ``map`` (:func:`guarded_map`); a row whose user function
raises is dropped and its input record goes to the DLQ, exactly as record-at-a-time
processing would, while the rest of the batch keeps the fast path.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import compress
from typing import Any, Protocol

from statekeeper.kafka.model import KafkaRecord


class Columns:
    """Parallel lists: ``keys[i]``, ``values[i]``, input record index ``src[i]``."""

    __slots__ = ("keys", "values", "src")

    def __init__(self, keys: list[Any], values: list[Any], src: list[int] | None) -> None:
        self.keys = keys
        self.values = values
        self.src = src

    def __len__(self) -> int:
        return len(self.keys)

    def sources(self) -> list[int] | range:
        return range(len(self.keys)) if self.src is None else self.src


class ColumnBatchEnv(Protocol):
    """What batch ops need from the task."""

    records: Sequence[KafkaRecord]

    def reject(self, index: int, exc: BaseException) -> None:
        """Send input record ``index`` to the DLQ (re-raises fatal errors)."""

    def count_dropped(self, n: int) -> None: ...


FAILED: Any = object()  # a row whose user function raised
Failures = list[tuple[int, BaseException]]


def guarded_map(fn: Callable[..., Any], *columns: list[Any]) -> tuple[list[Any], Failures]:
    """``[fn(*row) for row in zip(*columns)]`` at ``map`` speed. A row whose call raises
    yields :data:`FAILED` and is listed with its exception; the other rows still run, and
    no row runs twice (user functions may have side effects)."""
    results: list[Any] = []
    failures: Failures = []
    iterators = [iter(c) for c in columns]
    while True:
        try:
            results.extend(map(fn, *iterators))
            return results, failures
        except Exception as exc:  # the row at len(results) raised; continue after it
            failures.append((len(results), exc))
            results.append(FAILED)


def drop_rows(
    cols: Columns, failures: Failures, env: ColumnBatchEnv, *columns: list[Any]
) -> tuple[list[list[Any]], list[int]]:
    """Reject the failed rows (DLQ) and remove them from ``columns``; returns the kept
    columns and their input record indices."""
    src = cols.sources()
    for row, exc in failures:
        env.reject(src[row], exc)
    bad = {row for row, _ in failures}
    keep = [i not in bad for i in range(len(cols))]
    kept = [list(compress(column, keep)) for column in columns]
    return kept, list(compress(src, keep))


def unpack_pairs(
    pairs: list[Any], src: list[int] | range, env: ColumnBatchEnv
) -> tuple[list[Any], list[Any], list[int] | range]:
    """Split ``(key, value)`` pairs into columns; a row that is not a pair goes to the DLQ."""
    try:
        return [k for k, _ in pairs], [v for _, v in pairs], src
    except (TypeError, ValueError):
        pass
    keys, values, kept = [], [], []
    for pair, i in zip(pairs, src, strict=True):
        try:
            k, v = pair
        except (TypeError, ValueError) as exc:
            env.reject(i, exc)
            continue
        keys.append(k)
        values.append(v)
        kept.append(i)
    return keys, values, kept
