"""Read entries of one store from the tasks' local RocksDB copies, decoded with its serdes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from statekeeper.errors import ConfigError
from statekeeper.ops.live_task import read_only_store
from statekeeper.ops.stores.local_stores import list_local_stores, store_specs
from statekeeper.settings import StatekeeperSettings
from statekeeper.stores.builders import StoreSpec
from statekeeper.stores.serdes import serde_for
from statekeeper.stores.window_bytes import WindowBytesStore

# A window store's inner database keys: segment(8) | len(key)(4) | key | window start(8);
# keys starting with 0xff*8 are its bookkeeping (observed stream time), not entries.
_WINDOW_BOOKKEEPING = b"\xff" * 8


@dataclass(frozen=True)
class StoreEntry:
    """One entry: ``window_start`` is set for window stores only."""

    task: str
    key: Any
    value: Any
    window_start: int | None = None


def inspect_store(
    settings: StatekeeperSettings,
    topology: Any,
    store: str,
    *,
    key: str | None = None,
    prefix: str | None = None,
    limit: int = 100,
) -> list[StoreEntry]:
    """Up to ``limit`` entries of ``store`` across its local task copies.

    ``key`` selects one key, ``prefix`` keys whose serialized form starts with the
    serialized prefix (string keys: a text prefix). Both are given as text and serialized
    with the store's key serde (``int`` keys: ``--key 42``).
    """
    specs = store_specs(topology)
    if store not in specs:
        raise ConfigError(f"the app has no store {store!r}; stores: {', '.join(sorted(specs))}")
    if key is not None and prefix is not None:
        raise ConfigError("give a key or a prefix, not both")
    spec = specs[store][1]
    if not spec.persistent:
        raise ConfigError(
            f"store {store!r} is {spec.kind}: it lives only in the running app's memory"
        )
    key_serde, value_serde = serde_for(spec.key_serde), serde_for(spec.value_serde)
    wanted = _serialize(key_serde, key if key is not None else prefix)
    window = spec.kind == "window"
    entries: list[StoreEntry] = []
    for copy in list_local_stores(settings, topology):
        if copy.store != store or not copy.on_disk:
            continue
        for raw_key, raw_value, start in _raw_entries(Path(copy.path), window, spec):
            if wanted is not None and (
                raw_key != wanted if key is not None else not raw_key.startswith(wanted)
            ):
                continue
            entries.append(
                StoreEntry(
                    copy.task,
                    key_serde.deserialize(raw_key),
                    value_serde.deserialize(raw_value),
                    start,
                )
            )
            if len(entries) >= limit:
                return entries
    return entries


def _serialize(serde: Any, text: str | None) -> bytes | None:
    if text is None:
        return None
    for candidate in (text, _as_int(text)):
        if candidate is None:
            continue
        try:
            return serde.serialize(candidate)
        except Exception:  # noqa: BLE001 - a serde rejects what it cannot encode
            continue
    raise ConfigError(f"{text!r} cannot be serialized with the store's key serde")


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _raw_entries(
    path: Path, window: bool, spec: StoreSpec
) -> Iterator[tuple[bytes, bytes, int | None]]:
    with read_only_store(path, spec.name, spec) as store:
        for raw_key, raw_value in store.items():
            if not window:
                yield raw_key, raw_value, None
            elif not raw_key.startswith(_WINDOW_BOOKKEEPING):
                key, start = WindowBytesStore._split_store_key(raw_key)
                yield key, raw_value, start
