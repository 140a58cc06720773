"""Names the DSL generated, and how they shift.

A :class:`~statekeeper.processing.dsl.StreamsBuilder` numbers everything it creates with one
counter (nodes, unnamed stores, unnamed repartition topics), as Kafka Streams does: a store
with no ``Materialized.as_(...)`` name is ``<kind>-state-store-<10 digits>`` (for example
``kstream-aggregate-state-store-0000000003``), an unnamed ``repartition()`` topic
``<app>-kstream-repartition-<10 digits>-repartition``, and a grouping without a ``Grouped``
name repartitions through a topic named after its store. Adding a node before such a name
(a ``filter`` upstream) changes its number: the store, its changelog and its repartition
topic get new names, and the state under the old ones is no longer read.
"""

from __future__ import annotations

import re

_STORE = re.compile(r".-state-store-\d{10}$")
_TOPIC = re.compile(r".-\d{10}-repartition$")
_COUNTER = re.compile(r"\d{10}")

#: What a verdict says about a generated name.
HINT = (
    "auto-generated name (the DSL numbers it with a counter that shifts when a node is "
    "added before it): name it, Materialized.as_(...) for a store, Grouped.as_(...) for a "
    "grouping or repartition()"
)


def is_generated_store(name: str) -> bool:
    """Whether a store name is one the DSL generated (``...-state-store-0000000003``)."""
    return _STORE.search(name) is not None


def is_generated_topic(topic: str) -> bool:
    """Whether a repartition topic's name holds a DSL counter."""
    return _TOPIC.search(topic) is not None


def name_stem(name: str) -> str:
    """A generated name with its counters blanked out: two names with one stem differ only
    by their counters (the same DSL call, numbered differently)."""
    return _COUNTER.sub("#", name)


def shifted_pairs(old: list[str], new: list[str]) -> dict[str, str]:
    """Generated names that probably shifted: each name of ``new`` (not in ``old``) mapped to
    a name of ``old`` (not in ``new``) with the same stem. Where a stem has as many names
    gone as come, they pair up in counter order (the DSL numbers in building order)."""
    gone = sorted(n for n in old if n not in new)
    came = sorted(n for n in new if n not in old)
    pairs: dict[str, str] = {}
    for stem in {name_stem(n) for n in came}:
        were = [n for n in gone if name_stem(n) == stem]
        now = [n for n in came if name_stem(n) == stem]
        if len(were) == len(now):
            pairs.update(zip(now, were, strict=True))
    return pairs
