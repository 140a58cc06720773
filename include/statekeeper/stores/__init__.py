"""State stores: key-value (RocksDB, in-memory, LRU) and window stores, built as layer stacks."""

from statekeeper.stores.builders import Stores, StoreSpec, build_store
from statekeeper.stores.metered import KeyValueStore, WindowStore
from statekeeper.stores.serdes import (
    BytesSerde,
    IntSerde,
    JsonSerde,
    Serde,
    SerdeError,
    StringSerde,
)
from statekeeper.stores.windows import TimeWindows

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
