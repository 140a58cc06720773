"""A store's contents as raw bytes, compared entry by entry, keys shown decoded.

Contents are ``{changelog key: value bytes}``: a key-value store's key, or for a window store
``key | window start`` (the changelog's key format), so every drill check compares bytes the
same way, whatever the serdes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from statekeeper.ops.drill.record import MAX_EXAMPLES
from statekeeper.stores.builders import StoreSpec
from statekeeper.stores.serdes import serde_for
from statekeeper.stores.typed import WindowStore
from statekeeper.stores.window_bytes import changelog_window_key, split_changelog_window_key

Contents = dict[bytes, bytes]


def store_contents(store: Any) -> Contents:
    """Every entry of an open typed store (``KeyValueStore`` or ``WindowStore``) as bytes,
    staged writes included."""
    if isinstance(store, WindowStore):
        return {changelog_window_key(k, start): v for k, start, v in store.wrapped.all()}
    return dict(store.wrapped.all())


def show_key(spec: StoreSpec, raw: bytes) -> str:
    """A changelog key for people: decoded with the store's key serde (``key@start`` for
    windows), or its bytes when it does not decode."""
    start = None
    if spec.kind == "window":
        raw, start = split_changelog_window_key(raw)
    try:
        key: Any = serde_for(spec.key_serde).deserialize(raw)
        text = key if isinstance(key, str) else json.dumps(key, sort_keys=True, default=repr)
    except Exception:  # noqa: BLE001 - any serde failure: show the bytes instead
        text = repr(raw)
    return text if start is None else f"{text}@{start}"


@dataclass
class ContentsDiff:
    """How ``actual`` differs from ``expected``: keys only expected (missing), only actual
    (unexpected), or in both with other values (differ); ``examples`` holds up to
    :data:`MAX_EXAMPLES` raw keys, differing values first."""

    missing: int = 0
    unexpected: int = 0
    differ: int = 0
    examples: list[bytes] = field(default_factory=list)

    @property
    def equal(self) -> bool:
        return not (self.missing or self.unexpected or self.differ)

    def counts(self) -> dict[str, int]:
        return {"missing": self.missing, "unexpected": self.unexpected, "differ": self.differ}

    def describe(self, expected: str, actual: str) -> str:
        return (
            f"{self.differ} key(s) with other values, {self.missing} in {expected} but not in "
            f"{actual}, {self.unexpected} in {actual} but not in {expected}"
        )


def diff_contents(expected: Contents, actual: Contents) -> ContentsDiff:
    """Compare two contents key by key (sorted examples, so a report is reproducible)."""
    diff = ContentsDiff()
    differ = sorted(k for k, v in expected.items() if k in actual and actual[k] != v)
    missing = sorted(expected.keys() - actual.keys())
    unexpected = sorted(actual.keys() - expected.keys())
    diff.differ, diff.missing, diff.unexpected = len(differ), len(missing), len(unexpected)
    diff.examples = (differ + missing + unexpected)[:MAX_EXAMPLES]
    return diff
