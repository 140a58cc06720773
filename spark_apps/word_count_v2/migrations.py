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


def word_counts_output_expected(word: str, old: Any, new: Any) -> bool:
    """A shadow run's output diff: v1's latest output of ``word`` (its count as text) against
    v2's (``{"count", "first_seen_ms"}``). The store's migration does not apply to v1's
    output, which is not the store's value but its text: the same count is an expected
    difference, whatever ``first_seen_ms`` v2 gives (its store's compare checks that)."""
    if not isinstance(old, str) or not isinstance(new, dict):
        return False
    return old.isdigit() and int(old) == new.get("count")
