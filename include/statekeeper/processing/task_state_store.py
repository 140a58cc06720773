"""The internal per-task state: stream time, punctuation schedules, repartition dedupe
positions. Kept in one logged key-value store per subtopology (``sk-task-state-<id>``), so a
restarted task continues exactly where the committed batch left off; written once per batch,
in the same commit as the data.
"""

from __future__ import annotations

from typing import Any

from statekeeper.stores.builders import Stores, StoreSpec

STORE_PREFIX = "sk-task-state-"
_STREAM_TIME = "stream-time"
_PUNCTUATION = "punctuation|"
_DEDUPE = "dedupe|"
NO_TIME = -1


def task_state_store_name(subtopology_id: int) -> str:
    return f"{STORE_PREFIX}{subtopology_id}"


def task_state_spec(subtopology_id: int) -> StoreSpec:
    """Spec of the internal store (RocksDB, logged, str keys, JSON values)."""
    return Stores.persistent(task_state_store_name(subtopology_id)).with_serdes("str", "json")


class TaskState:
    """Loads and saves a task's stream time, punctuation times and dedupe positions.

    With ``store=None`` (a stateless subtopology) nothing is persisted: stream time starts
    from -1 in every batch.
    """

    def __init__(self, store: Any | None) -> None:
        self.store = store
        self.stream_time = NO_TIME
        self.punctuations: dict[str, int] = {}
        #: "<topic>|<upstream task>" -> (batch, seq, newest upstream epoch)
        self.dedupe: dict[str, tuple[int, int, int]] = {}
        self._saved: dict[str, Any] = {}
        if store is None:
            return
        raw = store.get(_STREAM_TIME)
        if raw is not None:
            self.stream_time = int(raw)
        for key, value in store.prefix_scan(_PUNCTUATION):
            self.punctuations[key[len(_PUNCTUATION) :]] = int(value)
        for key, value in store.prefix_scan(_DEDUPE):
            epoch = int(value[2]) if len(value) > 2 else 0  # saved before fencing: none
            self.dedupe[key[len(_DEDUPE) :]] = (int(value[0]), int(value[1]), epoch)
        self._saved = self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        snap: dict[str, Any] = {}
        if self.stream_time != NO_TIME:
            snap[_STREAM_TIME] = self.stream_time
        snap.update({_PUNCTUATION + k: v for k, v in self.punctuations.items()})
        snap.update({_DEDUPE + k: [b, s, e] for k, (b, s, e) in self.dedupe.items()})
        return snap

    def save(self) -> None:
        """Write what changed since the last load/save (deleted schedules become tombstones)."""
        if self.store is None:
            return
        snap = self._snapshot()
        changes: list[tuple[str, Any]] = [
            (k, v) for k, v in snap.items() if self._saved.get(k) != v
        ]
        changes.extend((k, None) for k in self._saved if k not in snap)
        if changes:
            changes.sort(key=lambda kv: kv[0])
            self.store.put_all(changes)
        self._saved = snap


def merged_task_state(
    states: dict[int, list[tuple[str, Any]]], scoped_topics: frozenset[str]
) -> list[tuple[str, Any]]:
    """One task's internal state from several old tasks' (``partition -> entries``), for a
    migration that re-keys their state into new tasks (statekeeper.migration.rekey): the
    newest stream time, the earliest next time of each punctuation (none is skipped), and
    each old task's dedupe positions of ``scoped_topics`` (the old repartition topics the new
    task reads once) under the old partition's scoped name
    (:func:`statekeeper.processing.repartition_dedupe.scoped_topic`): a position holds for
    the records of one partition, and the new task reads every old partition."""
    from statekeeper.processing.repartition_dedupe import scoped_topic

    merged: dict[str, Any] = {}
    for partition, entries in sorted(states.items()):
        for key, value in entries:
            if key == _STREAM_TIME:
                merged[key] = max(int(value), int(merged.get(key, NO_TIME)))
            elif key.startswith(_PUNCTUATION):
                merged[key] = min(int(value), int(merged.get(key, value)))
            elif key.startswith(_DEDUPE):
                topic, _, upstream = key[len(_DEDUPE) :].partition("|")
                if topic in scoped_topics:
                    topic = scoped_topic(topic, partition)
                merged[f"{_DEDUPE}{topic}|{upstream}"] = value
            else:
                merged[key] = value
    return sorted(merged.items())
