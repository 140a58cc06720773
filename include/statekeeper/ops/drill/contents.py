"""A store's contents as raw bytes, compared entry by entry, keys and values shown decoded.

Contents are ``{changelog key: value bytes}``: a key-value store's key, or for a window store
``key | window start`` (the changelog's key format), so every drill check compares bytes the
same way, whatever the serdes.

A failed comparison shows up to :data:`~statekeeper.ops.drill.record.MAX_EXAMPLES` keys
with their values on each side it knows (:func:`mismatches`): the restored copy, what it
was compared with (``recomputed``, ``expected``), and the live store on this machine, read
read-only (:func:`live_values`) where there is one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statekeeper.errors import StatekeeperError
from statekeeper.ops.drill.record import FAIL, MAX_EXAMPLES, PASS, CheckResult, Mismatch
from statekeeper.ops.live_task import open_store_view
from statekeeper.settings import StatekeeperSettings
from statekeeper.state.directory import TaskDirectory
from statekeeper.stores.builders import StoreSpec
from statekeeper.stores.serdes import serde_for
from statekeeper.stores.typed import WindowStore
from statekeeper.stores.window_bytes import (
    WindowBytesStore,
    changelog_window_key,
    split_changelog_window_key,
)

Contents = dict[bytes, bytes]
#: Values of some keys on one side; None: the key is absent there.
Values = dict[bytes, bytes | None]

# A window store's inner keys starting with this are bookkeeping (observed stream time).
_WINDOW_BOOKKEEPING = b"\xff" * 8


def store_contents(store: Any) -> Contents:
    """Every entry of an open typed store (``KeyValueStore`` or ``WindowStore``) as bytes,
    staged writes included."""
    if isinstance(store, WindowStore):
        return {changelog_window_key(k, start): v for k, start, v in store.wrapped.all()}
    return dict(store.wrapped.all())


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=repr)


def show_key(spec: StoreSpec, raw: bytes) -> str:
    """A changelog key for people: decoded with the store's key serde (``key@start`` for
    windows), or its bytes when it does not decode."""
    start = None
    if spec.kind == "window":
        raw, start = split_changelog_window_key(raw)
    try:
        text = _text(serde_for(spec.key_serde).deserialize(raw))
    except Exception:  # noqa: BLE001 - any serde failure: show the bytes instead
        text = repr(raw)
    return text if start is None else f"{text}@{start}"


def show_value(spec: StoreSpec, raw: bytes | None) -> str | None:
    """A stored value for people: decoded with the store's value serde, or its bytes when it
    does not decode; None stays None (the key is absent)."""
    if raw is None:
        return None
    try:
        return _text(serde_for(spec.value_serde).deserialize(raw))
    except Exception:  # noqa: BLE001 - any serde failure: show the bytes instead
        return repr(raw)


@dataclass
class ContentsDiff:
    """How ``actual`` differs from ``expected``: keys only expected (missing), only actual
    (unexpected), or in both with other values (differ); ``examples`` holds up to
    :data:`MAX_EXAMPLES` raw keys, differing values first, and ``example_values`` their
    ``(expected, actual)`` values (None where the key is absent)."""

    missing: int = 0
    unexpected: int = 0
    differ: int = 0
    examples: list[bytes] = field(default_factory=list)
    example_values: list[tuple[bytes | None, bytes | None]] = field(default_factory=list)

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
    diff.example_values = [(expected.get(k), actual.get(k)) for k in diff.examples]
    return diff


def mismatches(
    spec: StoreSpec,
    diff: ContentsDiff,
    *,
    expected_as: str,
    actual_as: str = "restored",
    live: Values | None = None,
) -> list[Mismatch]:
    """The diff's example keys with their values, decoded: ``{"key", actual_as, expected_as,
    "live"}`` (``live`` only when known)."""
    found = []
    for key, (expected, actual) in zip(diff.examples, diff.example_values, strict=True):
        row: Mismatch = {
            "key": show_key(spec, key),
            actual_as: show_value(spec, actual),
            expected_as: show_value(spec, expected),
        }
        if live is not None:
            row["live"] = show_value(spec, live.get(key))
        found.append(row)
    return found


def diff_result(
    spec: StoreSpec,
    diff: ContentsDiff,
    what: str,
    *,
    expected_as: str,
    passed: str,
    live: Values | None = None,
) -> CheckResult:
    """``pass`` with ``passed`` as detail when the diff is empty, else ``fail`` naming the
    counts, the example keys and their values (restored vs ``expected_as``, and live)."""
    if diff.equal:
        return CheckResult(PASS, passed)
    return CheckResult(
        FAIL,
        diff.describe(what, "the restored copy"),
        [show_key(spec, k) for k in diff.examples],
        diff.counts(),
        mismatches(spec, diff, expected_as=expected_as, live=live),
    )


def live_values(
    settings: StatekeeperSettings, task_id: str, spec: StoreSpec, keys: list[bytes]
) -> Values | None:
    """The values of ``keys`` (changelog keys) in the live task's local store on this
    machine, opened read-only (no lock, nothing written; the app may be running), so a
    report can show them beside the restored ones. None when there is no local copy to read
    (an in-memory store, a task that never ran here) or it cannot be opened."""
    if not keys or not spec.persistent:
        return None
    path = TaskDirectory(settings.state_dir, settings.application_id, task_id).store_path(spec.name)
    if not path.is_dir():
        return None
    try:
        return _read_live(path, spec, keys)
    except (StatekeeperError, OSError):
        return None


def _read_live(path: Path, spec: StoreSpec, keys: list[bytes]) -> Values:
    db = open_store_view(path, spec)
    try:
        if spec.kind != "window":
            return {k: db.get(k) for k in keys}
        # Window entries live under segment-prefixed keys: scan for the wanted ones.
        wanted = set(keys)
        found: Values = dict.fromkeys(keys)
        for inner, value in db.items():
            if inner.startswith(_WINDOW_BOOKKEEPING):
                continue
            key = changelog_window_key(*WindowBytesStore._split_store_key(inner))
            if key in wanted:
                found[key] = value
        return found
    finally:
        db.close()
