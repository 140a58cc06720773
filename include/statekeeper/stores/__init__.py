"""State stores: key-value (RocksDB, in-memory, LRU) and window stores, built as layer stacks."""

from statekeeper.stores.builders import Stores, StoreSpec, build_store
from statekeeper.stores.serdes import (
    BytesSerde,
    IntSerde,
    JsonSerde,
    Serde,
    SerdeError,
    StringSerde,
)
from statekeeper.stores.time_windows import TimeWindows
from statekeeper.stores.typed import KeyValueStore, WindowStore

__all__ = [
    "BytesSerde",
    "IntSerde",
    "JsonSerde",
    "KeyValueStore",
    "Serde",
    "SerdeError",
    "StoreSpec",
    "Stores",
    "StringSerde",
    "TimeWindows",
    "WindowStore",
    "build_store",
]
