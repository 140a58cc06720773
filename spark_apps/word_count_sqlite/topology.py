"""word_count_sqlite: word_count's topology with its counts in SQLite, a custom store engine
(docs/custom-stores.md).

The spec loads this file by path and Spark ships it to the executors by value; so are the
two files it builds on, loaded here the same way: word_count's topology and the SQLite store
(sqlite_store.py). Only statekeeper and the standard library are imported.
"""

from __future__ import annotations

from pathlib import Path

from statekeeper.app.app_files import import_topology_file
from statekeeper.processing.topology import Topology

_HERE = Path(__file__).resolve().parent
_word_count = import_topology_file(_HERE.parent / "word_count" / "topology.py")
_sqlite_store = import_topology_file(_HERE / "sqlite_store.py")


def build_topology(
    input_topic: str = "lines",
    output_topic: str = "word-counts",
    store: str = "word-counts",
    synchronous: str = "FULL",
) -> Topology:
    """word_count's topology, its ``store`` kept by :class:`SQLiteStoreSupplier`."""
    supplier = _sqlite_store.SQLiteStoreSupplier(synchronous=synchronous)
    return _word_count.build_topology(input_topic, output_topic, store, supplier=supplier)
