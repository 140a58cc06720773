"""Split input records into tasks: one per (topic, partition), in offset order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from statekeeper.kafka.model import KafkaRecord

RecordsInput = Mapping[int, Iterable[KafkaRecord]] | Iterable[KafkaRecord]


def by_task(records: RecordsInput) -> list[tuple[tuple[str, int], list[KafkaRecord]]]:
    """``[((topic, partition), records)]`` sorted by topic and partition.

    Accepts ``{partition: records}`` or a flat iterable; each task keeps the order it was
    given (per-partition offset order is the caller's promise) and offsets must rise.
    """
    flat: Iterable[KafkaRecord]
    if isinstance(records, Mapping):
        flat = (record for partition in sorted(records) for record in records[partition])
    else:
        flat = records
    tasks: dict[tuple[str, int], list[KafkaRecord]] = {}
    for record in flat:
        task = tasks.setdefault((record.topic, record.partition), [])
        if task and record.offset <= task[-1].offset:
            raise ValueError(
                f"records of {record.topic}[{record.partition}] are not in offset order: "
                f"{record.offset} after {task[-1].offset}"
            )
        task.append(record)
    return sorted(tasks.items())
