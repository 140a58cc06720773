"""The build-time probe of custom store suppliers (statekeeper.stores.supplier_contract).

A supplier whose stores break the contract the layers, commits and restores rely on is
refused when the store is declared (``Stores.custom``, ``Stores.window(supplier=...)``),
with a StoreContractError naming the method, instead of corrupting state at the first
crash. The broken suppliers below are small module-level classes: the probe pickles every
supplier, as the executors will.
"""

from __future__ import annotations

import copy
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from spark_apps.word_count_sqlite.sqlite_store import SQLiteKeyValueStore
from statekeeper.errors import InvalidStoreConfigError, StoreContractError
from statekeeper.stores.base import KeyValueBytesStore, StoreMetadata, Value
from statekeeper.stores.builders import Stores, StoreSpec
from statekeeper.stores.memory import InMemoryKeyValueStore
from statekeeper.stores.supplier import StoreSupplier

from .custom_suppliers import SQLiteStoreSupplier, StagingMemoryStore, StagingMemoryStoreSupplier

# -- stores that break the contract, each in one way ------------------------------------------


class MetadataNoneStore(StagingMemoryStore):
    """read_metadata() returns None instead of a StoreMetadata."""

    def read_metadata(self) -> StoreMetadata:
        return None  # type: ignore[return-value]


class MetadataDroppingStore(StagingMemoryStore):
    """commit() applies the writes but not the metadata."""

    def commit(self, metadata: StoreMetadata) -> None:
        super().commit(StoreMetadata())


class MetadataNotDurableStore(SQLiteKeyValueStore):
    """commit() makes the writes durable but keeps the metadata in memory only, so a
    restart finds the data without the offsets it belongs to."""

    def __init__(self, name: str, directory: Path) -> None:
        self.volatile_metadata = StoreMetadata()
        super().__init__(name, directory)

    def commit(self, metadata: StoreMetadata) -> None:
        super().commit(StoreMetadata())
        self.volatile_metadata = copy.deepcopy(metadata)

    def read_metadata(self) -> StoreMetadata:
        return copy.deepcopy(self.volatile_metadata)


class WriteThroughStore(SQLiteKeyValueStore):
    """put() writes to the file at once; an undo log makes discard() work, but a crash
    before commit() leaves the uncommitted writes on disk."""

    def __init__(self, name: str, directory: Path) -> None:
        self.undo: dict[bytes, Value] = {}
        super().__init__(name, directory)

    def put(self, key: bytes, value: Value) -> None:
        self.undo.setdefault(key, self.get(key))
        self.restore_batch([(key, value)], None)  # straight to the file, no metadata

    def put_all(self, items) -> None:  # type: ignore[override]
        for key, value in items:
            self.put(key, value)

    def discard(self) -> None:
        self.restore_batch(list(self.undo.items()), None)
        self.undo.clear()

    def commit(self, metadata: StoreMetadata) -> None:
        self.undo.clear()
        super().commit(metadata)


class NoDiscardStore(StagingMemoryStore):
    """discard() does nothing: a failed batch's writes would be committed with the rerun."""

    def discard(self) -> None:
        pass


class RestoreDropsMetadataStore(StagingMemoryStore):
    """restore_batch() applies the records but not the metadata."""

    def restore_batch(
        self, records: list[tuple[bytes, Value]], metadata: StoreMetadata | None
    ) -> None:
        super().restore_batch(records, None)


class WipeKeepsMetadataStore(SQLiteKeyValueStore):
    """wipe() drops the entries but keeps the metadata of the last commit: a restore into
    the wiped store would start from that offset and miss everything before it."""

    def wipe(self) -> None:
        metadata = self.read_metadata()
        super().wipe()
        self.commit(metadata)


class NoWipeStore(StagingMemoryStore):
    """wipe() does nothing."""

    def wipe(self) -> None:
        pass


class ExclusiveEndRangeStore(StagingMemoryStore):
    """range() leaves out its end bound."""

    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        entries = super().range(start, end, reverse=reverse)
        return ((k, v) for k, v in entries if end is None or k < end)


class ReverseIgnoredStore(StagingMemoryStore):
    """range(reverse=True) still yields in ascending key order."""

    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return super().range(start, end)


# -- suppliers -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemorySupplierOf(StoreSupplier):
    """A non-persistent supplier of ``store`` (a class taking the store's name)."""

    store: type
    engine = "test-memory"
    persistent = False

    def get(self, name: str, directory: Path) -> KeyValueBytesStore:
        return self.store(name)


@dataclass(frozen=True)
class FileSupplierOf(StoreSupplier):
    """A persistent supplier of ``store`` (a class taking name and directory), without
    open_read_only() (allowed: operator reads of its stores are refused)."""

    store: type
    engine = "test-file"
    persistent = True

    def get(self, name: str, directory: Path) -> KeyValueBytesStore:
        return self.store(name, directory)


@dataclass(frozen=True)
class NotAStoreSupplier(StoreSupplier):
    """get() returns a dict, not a KeyValueBytesStore."""

    persistent = False

    def get(self, name: str, directory: Path) -> KeyValueBytesStore:
        return {}  # type: ignore[return-value]


@dataclass(frozen=True)
class FailingSupplier(StoreSupplier):
    """get() raises: the engine cannot open a store."""

    def get(self, name: str, directory: Path) -> KeyValueBytesStore:
        raise OSError("disk full")


@dataclass(frozen=True)
class StoreAsViewSupplier(SQLiteStoreSupplier):
    """open_read_only() returns a key-value store instead of a ReadOnlyStoreView."""

    def open_read_only(self, name: str, directory: Path):  # type: ignore[override]
        return InMemoryKeyValueStore(name)


@dataclass(frozen=True)
class LockHoldingSupplier(SQLiteStoreSupplier):
    """Holds a lock: it cannot be pickled to travel to the executors."""

    lock: threading.Lock = field(default_factory=threading.Lock, compare=False)  # type: ignore[assignment]


@dataclass(frozen=True)
class LambdaSupplier(StoreSupplier):
    """Makes its stores with a lambda: it cannot be pickled to travel to the executors."""

    make: Callable[[str], KeyValueBytesStore] = lambda name: StagingMemoryStore(name)  # noqa: E731
    persistent = False

    def get(self, name: str, directory: Path) -> KeyValueBytesStore:
        return self.make(name)


class DuckSupplier:
    """Looks like a supplier but is no StoreSupplier."""

    engine = "duck"
    persistent = False

    def get(self, name: str, directory: Path) -> KeyValueBytesStore:
        return StagingMemoryStore(name)


class CountingSupplier(StoreSupplier):
    """Counts the stores it opened (the probe opens one per step of its run)."""

    persistent = False

    def __init__(self) -> None:
        self.opened = 0

    def get(self, name: str, directory: Path) -> KeyValueBytesStore:
        self.opened += 1
        return StagingMemoryStore(name)


BROKEN = [
    pytest.param(
        MemorySupplierOf(MetadataNoneStore),
        "read_metadata()",
        "returned None after get() on an empty directory",
        id="read_metadata-returns-None",
    ),
    pytest.param(
        MemorySupplierOf(MetadataDroppingStore),
        "read_metadata()",
        "after commit()",
        id="commit-drops-metadata",
    ),
    pytest.param(
        FileSupplierOf(MetadataNotDurableStore),
        "read_metadata()",
        "after close() and get() again",
        id="commit-does-not-persist-metadata",
    ),
    pytest.param(
        FileSupplierOf(WriteThroughStore),
        "commit()",
        "a write never committed survived close() and get()",
        id="writes-through-before-commit",
    ),
    pytest.param(
        MemorySupplierOf(NoDiscardStore),
        "discard()",
        "writes staged since the last commit() are still visible",
        id="discard-does-nothing",
    ),
    # The built-in in-memory store writes straight through: no custom store.
    pytest.param(
        MemorySupplierOf(InMemoryKeyValueStore),
        "discard()",
        "still visible",
        id="built-in-in-memory-store",
    ),
    pytest.param(
        MemorySupplierOf(RestoreDropsMetadataStore),
        "read_metadata()",
        "after restore_batch()",
        id="restore_batch-drops-metadata",
    ),
    pytest.param(
        FileSupplierOf(WipeKeepsMetadataStore),
        "read_metadata()",
        "after wipe()",
        id="wipe-keeps-metadata",
    ),
    pytest.param(
        MemorySupplierOf(ExclusiveEndRangeStore),
        "range()",
        "bounds are not inclusive",
        id="range-end-exclusive",
    ),
    pytest.param(
        MemorySupplierOf(ReverseIgnoredStore),
        "range(reverse=True)",
        "yielded [(b'a', b'1'), (b'b', b'22'), (b'c', b'333')]",
        id="range-ignores-reverse",
    ),
    pytest.param(
        NotAStoreSupplier(),
        "get()",
        "returned dict, not a KeyValueBytesStore",
        id="get-returns-no-store",
    ),
    pytest.param(FailingSupplier(), "get()", "raised OSError: disk full", id="get-raises"),
    pytest.param(
        StoreAsViewSupplier(),
        "open_read_only()",
        "returned InMemoryKeyValueStore, not a ReadOnlyStoreView",
        id="open_read_only-returns-no-view",
    ),
    pytest.param(LockHoldingSupplier(), "pickling", "lock", id="unpicklable-lock"),
    pytest.param(LambdaSupplier(), "pickling", "lambda", id="unpicklable-lambda"),
]


@pytest.mark.parametrize(("supplier", "method", "problem"), BROKEN)
def test_a_supplier_breaking_the_contract_is_refused_naming_the_method(supplier, method, problem):
    with pytest.raises(StoreContractError) as info:
        Stores.custom("counts", supplier)
    message = str(info.value)
    assert (
        f"store 'counts': {type(supplier).__name__} breaks the store contract in {method}: "
        in message
    )
    assert problem in message
    assert isinstance(info.value, InvalidStoreConfigError)  # what builder callers catch


# The first few broken stores: the segments of a window store go through the same probe.
@pytest.mark.parametrize(("supplier", "method", "problem"), BROKEN[:5])
def test_window_segments_of_a_broken_supplier_are_refused_too(supplier, method, problem):
    with pytest.raises(StoreContractError) as info:
        Stores.window("w", size_ms=10, retention_ms=100, supplier=supplier)
    assert f"store 'w': {type(supplier).__name__} breaks the store contract in {method}: " in (
        str(info.value)
    )
    assert problem in str(info.value)


def test_window_segments_from_an_object_that_is_no_store_supplier_are_refused():
    with pytest.raises(StoreContractError, match="needs a StoreSupplier, got str"):
        Stores.window("w", size_ms=10, retention_ms=100, supplier="sqlite")  # type: ignore[arg-type]


def test_a_non_persistent_store_whose_wipe_does_nothing_is_refused():
    with pytest.raises(StoreContractError, match=r"after wipe\(\)"):
        Stores.custom("counts", MemorySupplierOf(NoWipeStore))


def test_a_refused_supplier_stays_refused():
    # Only suppliers that passed are remembered: a second declaration probes again.
    supplier = MemorySupplierOf(NoDiscardStore)
    for name in ("first", "second"):
        with pytest.raises(StoreContractError, match=rf"store '{name}': .* in discard\(\)"):
            Stores.custom(name, supplier)


@pytest.mark.parametrize("supplier", [DuckSupplier(), SQLiteKeyValueStore, "sqlite"])
def test_an_object_that_is_no_store_supplier_is_refused(supplier):
    with pytest.raises(StoreContractError) as info:
        Stores.custom("counts", supplier)  # type: ignore[arg-type]
    message = str(info.value)
    assert "store 'counts': a custom store needs a StoreSupplier, got " in message
    assert type(supplier).__name__ in message


@pytest.mark.parametrize(
    "supplier",
    [
        SQLiteStoreSupplier(),
        SQLiteStoreSupplier(synchronous="off"),
        StagingMemoryStoreSupplier(),
        # A persistent store without open_read_only() still runs.
        FileSupplierOf(SQLiteKeyValueStore),
    ],
    ids=["sqlite", "sqlite-synchronous-off", "staging-memory", "no-read-only-view"],
)
def test_suppliers_keeping_the_contract_pass(supplier):
    spec = Stores.custom("counts", supplier)
    assert spec.supplier is supplier
    assert spec.persistent is supplier.persistent
    assert spec.engine == supplier.engine
    window = Stores.window("w", size_ms=10, retention_ms=100, supplier=supplier)
    assert window.persistent is supplier.persistent


def test_the_probe_runs_once_per_supplier_object():
    supplier = CountingSupplier()
    spec = Stores.custom("counts", supplier)
    probed = supplier.opened
    assert probed >= 1
    # Copies of the spec share the supplier: none of them probes it again, nor do other
    # stores declared with the same object.
    spec.with_serdes("str", "int").with_logging_disabled().with_caching_enabled(1024)
    spec.with_logging_enabled({"min.insync.replicas": "2"}).with_caching_disabled()
    Stores.custom("other", supplier)
    Stores.window("w", size_ms=10, retention_ms=100, supplier=supplier)
    assert supplier.opened == probed
    # Another object is probed on its own.
    other = CountingSupplier()
    Stores.custom("counts", other)
    assert other.opened == probed


def test_the_probe_leaves_no_scratch_files(tmp_path, monkeypatch):
    # The probe (and the SQLite read-only view it opens) work in temporary directories.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    Stores.custom("counts", SQLiteStoreSupplier())
    with pytest.raises(StoreContractError):
        Stores.custom("counts", FileSupplierOf(WriteThroughStore))
    with pytest.raises(StoreContractError):
        Stores.custom("counts", FailingSupplier())
    assert list(tmp_path.iterdir()) == []


def test_a_custom_spec_needs_a_supplier():
    with pytest.raises(InvalidStoreConfigError, match="custom store 'counts' needs a supplier"):
        StoreSpec(name="counts", kind="custom")


@pytest.mark.parametrize("kind", ["rocksdb", "memory", "lru"])
def test_a_supplier_is_refused_on_built_in_key_value_kinds(kind):
    with pytest.raises(InvalidStoreConfigError) as info:
        StoreSpec(name="counts", kind=kind, capacity=10, supplier=SQLiteStoreSupplier())
    assert f"a supplier makes custom and window stores, not {kind!r} ones" in str(info.value)
    assert not isinstance(info.value, StoreContractError)  # refused before any probe
