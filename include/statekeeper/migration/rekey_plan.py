"""Which subtopologies' state a migration re-keys: their task count changed (repartitioning).

A stateful task's state holds the keys of one partition of its inputs. When a source topic
gets more (or fewer) partitions, the repartition topics derived from it follow, and with
them the number of tasks of every subtopology that reads them: the new version's task ``p``
must hold exactly the keys its repartition topic routes to partition ``p``
(``murmur2(key) % partitions``, like every statekeeper and Kafka producer of keyed records).
The migration moves each entry there (:mod:`statekeeper.migration.rekey`).

How many tasks the OLD state has is read from where it lives: the old changelogs' partition
counts (a changelog has one partition per task), not from the source topic, which may have
been expanded since.

Refused: a subtopology with state that reads a source topic directly. Its state is
partitioned as the producers partitioned that topic, with a partitioner statekeeper does not
choose, and the records the topic held past the old commits were routed by the old count: no
re-keying makes the new tasks see each key's whole history. Read it through a repartition
(``group_by``/``repartition``), keep the partition count, or rebuild the state (backfill).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from statekeeper.migration.functions import MigrationRefused


@dataclass(frozen=True)
class Rekey:
    """A subtopology whose ``old_tasks`` tasks' state becomes ``new_tasks`` tasks' state."""

    subtopology: int
    old_tasks: int
    new_tasks: int

    def as_dict(self) -> dict[str, int]:
        return {
            "subtopology": self.subtopology,
            "old_tasks": self.old_tasks,
            "new_tasks": self.new_tasks,
        }


def task_counts(topology: Any, app: str, partitions: dict[str, int]) -> dict[int, int]:
    """Tasks per subtopology: the most partitions of a topic it reads."""
    return {
        sub.id: max(
            (partitions.get(t, 0) for t in topology.subtopology_topics(app, sub.id)), default=0
        )
        for sub in topology.subtopologies
    }


def plan_rekeys(
    new_topology: Any,
    new_app: str,
    old_tasks: dict[int, int],
    new_tasks: dict[int, int],
) -> list[Rekey]:
    """The subtopologies whose state moves across tasks. ``old_tasks``: per subtopology with
    carried state, its old task count (from the old changelogs); ``new_tasks``: the new
    version's task counts. Raises :class:`MigrationRefused` for a subtopology reading a
    source topic directly (module docstring)."""
    rekeys, problems = [], []
    for sub, was in sorted(old_tasks.items()):
        now = new_tasks.get(sub, 0)
        if was == now:
            continue
        direct = [
            ref.resolve(new_app)
            for ref in new_topology.subtopology(sub).source_refs
            if not ref.repartition
        ]
        if direct:
            problems.append(
                f"subtopology {sub} has state and reads source topic(s) {', '.join(direct)} "
                f"directly, whose partition count changed ({was} -> {now} tasks): its state is "
                "partitioned as the producers partitioned the topic and the records past the "
                "old commits were routed by the old count, so no migration can re-key it "
                "exactly. Read the topic through a repartition (group_by), keep its partition "
                "count, or rebuild the state with statekeeper backfill"
            )
            continue
        rekeys.append(Rekey(sub, was, now))
    if problems:
        raise MigrationRefused("cannot migrate: " + "; ".join(problems))
    return rekeys
