"""word_count v1 → v2, per store (the spec's ``migrations:``; docs/changing-apps.md).

``statekeeper upgrade migrate`` calls each function once per entry of v1's committed state,
decoded with v1's serdes, and writes what it returns through v2's store. Like the topology
file it is loaded by path and shipped to Spark executors by value: import only statekeeper
and the standard library here.
"""

from __future__ import annotations

from typing import Any


def word_counts_v2(word: str, count: int) -> tuple[str, dict[str, Any]]:
    """v1's count of ``word`` → v2's entry. v1 did not record when a word was first seen:
    ``first_seen_ms`` is None, which v2 keeps (the word was seen before the upgrade)."""
    return word, {"count": count, "first_seen_ms": None}


def word_counts_expected(word: str, migrated: Any, new: Any) -> bool:
    """A shadow run's diff (``statekeeper upgrade diff``): v1's count migrated against v2's
    entry. v2 records when it first saw a word and v1 did not: the same count with
    ``first_seen_ms`` set by v2 is an expected difference; any other is not."""
    if migrated is None or new is None:
        return False
    return migrated["count"] == new["count"] and migrated["first_seen_ms"] is None
