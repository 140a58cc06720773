"""The build-time probe of a custom store's supplier: a store that breaks the contract the
layers, restores and commits rely on is refused when it is declared, naming the method,
instead of corrupting state at the first crash (docs/custom-stores.md)."""

from __future__ import annotations

import pickle
import shutil
import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from statekeeper.errors import StoreContractError
from statekeeper.stores.base import KeyValueBytesStore, StoreMetadata
from statekeeper.stores.read_only_view import ReadOnlyStoreView
from statekeeper.stores.supplier import StoreSupplier

_ENTRIES = [(b"a", b"1"), (b"b", b"22"), (b"c", b"333")]
_COMMITTED = StoreMetadata(
    changelog_offset=41, batch_id=7, source_offsets={"in:0": 12}, epoch=2, verified_offset=40
)
_RESTORED = StoreMetadata(changelog_offset=57, batch_id=9, source_offsets={"in:0": 20}, epoch=3)
#: Suppliers already probed (by identity, dropped with the object): ``with_*`` copies of a
#: spec share the supplier, and each copy would probe it again.
_checked: dict[int, weakref.ref[Any]] = {}
_checked_lock = threading.Lock()


class _Probe:
    """Runs one supplier through the contract; every failure names the method."""

    def __init__(self, supplier: StoreSupplier, name: str) -> None:
        self.supplier = supplier
        self.name = name

    def fail(self, method: str, problem: str) -> StoreContractError:
        return StoreContractError(
            f"store {self.name!r}: {type(self.supplier).__name__} breaks the store contract "
            f"in {method}: {problem} (docs/custom-stores.md)"
        )

    def call(self, method: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except StoreContractError:
            raise
        except Exception as exc:
            raise self.fail(method, f"raised {type(exc).__name__}: {exc}") from exc

    def open(self, directory: Path) -> KeyValueBytesStore:
        store = self.call("get()", self.supplier.get, self.name, directory)
        if not isinstance(store, KeyValueBytesStore):
            raise self.fail("get()", f"returned {type(store).__name__}, not a KeyValueBytesStore")
        return store

    def metadata(self, store: KeyValueBytesStore, expected: StoreMetadata, after: str) -> None:
        got = self.call("read_metadata()", store.read_metadata)
        if not isinstance(got, StoreMetadata):
            raise self.fail(
                "read_metadata()", f"returned {got!r} after {after}, expected a StoreMetadata"
            )
        if got != expected:
            raise self.fail("read_metadata()", f"returned {got} after {after}, expected {expected}")

    def contents(
        self, store: KeyValueBytesStore, expected: list[tuple[bytes, bytes]], after: str
    ) -> None:
        for key, value in expected:
            got = self.call("get()", store.get, key)
            if got != value:
                raise self.fail(
                    "get()", f"returned {got!r} for {key!r} after {after}, expected {value!r}"
                )
        scanned = list(self.call("range()", lambda: list(store.range(None, None))))
        if scanned != expected:
            raise self.fail(
                "range()", f"yielded {scanned} after {after}, expected {expected} in key order"
            )
        backwards = list(self.call("range()", lambda: list(store.range(None, None, reverse=True))))
        if backwards != expected[::-1]:
            raise self.fail("range(reverse=True)", f"yielded {backwards} after {after}")
        if expected:
            first, last = expected[0][0], expected[-1][0]
            inner = list(self.call("range()", lambda: list(store.range(first, last))))
            if inner != expected:
                raise self.fail(
                    "range()", f"bounds are not inclusive: ({first!r}, {last!r}) gave {inner}"
                )
        count = self.call("approximate_num_entries()", store.approximate_num_entries)
        if not isinstance(count, int) or count < 0:
            raise self.fail(
                "approximate_num_entries()", f"returned {count!r}, expected an int >= 0"
            )

    def run(self, root: Path) -> None:
        directory = root / self.name
        store = self.open(directory)
        try:
            self.commit_and_discard(store)
            if not self.supplier.persistent:  # nothing survives a close: wipe this one
                self.wipe_and_restore(store)
                return
            self.call("put()", store.put, b"staged", b"s")  # left uncommitted across the close
        finally:
            self.call("close()", store.close)
        store = self.open(directory)
        try:
            self.metadata(store, _COMMITTED, "close() and get() again")
            if self.call("get()", store.get, b"staged") is not None:
                raise self.fail(
                    "commit()",
                    "a write never committed survived close() and get(): writes must be "
                    "staged until commit() makes them durable with the metadata",
                )
            self.contents(store, _ENTRIES, "close() and get() again")
            self.read_only(directory)
            self.wipe_and_restore(store)
        finally:
            self.call("close()", store.close)

    def commit_and_discard(self, store: KeyValueBytesStore) -> None:
        self.metadata(store, StoreMetadata(), "get() on an empty directory")
        self.call("put()", store.put_all, [*_ENTRIES, (b"gone", b"x"), (b"gone", None)])
        self.contents(store, _ENTRIES, "put() before commit()")
        self.call("commit()", store.commit, _COMMITTED)
        self.metadata(store, _COMMITTED, "commit()")
        self.contents(store, _ENTRIES, "commit()")
        self.call("put()", store.put, b"staged", b"s")
        self.call("put()", store.put, b"a", None)
        self.call("discard()", store.discard)
        if (
            self.call("get()", store.get, b"staged") is not None
            or self.call("get()", store.get, b"a") != b"1"
        ):
            raise self.fail("discard()", "writes staged since the last commit() are still visible")

    def wipe_and_restore(self, store: KeyValueBytesStore) -> None:
        """``store`` holds the committed entries: wipe drops them, a restore brings others."""
        self.call("wipe()", store.wipe)
        self.metadata(store, StoreMetadata(), "wipe()")
        self.contents(store, [], "wipe()")
        restored = [(b"r1", b"v1"), (b"r2", b"v2")]
        self.call(
            "restore_batch()",
            store.restore_batch,
            [*restored, (b"r3", b"x"), (b"r3", None)],
            _RESTORED,
        )
        self.call("finish_restore()", store.finish_restore)
        self.metadata(store, _RESTORED, "restore_batch()")
        self.contents(store, restored, "restore_batch()")

    def read_only(self, directory: Path) -> None:
        try:
            view = self.supplier.open_read_only(self.name, directory)
        except NotImplementedError:
            return  # allowed: operator reads and queries refuse the store, naming the method
        except Exception as exc:
            raise self.fail("open_read_only()", f"raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(view, ReadOnlyStoreView):
            raise self.fail(
                "open_read_only()", f"returned {type(view).__name__}, not a ReadOnlyStoreView"
            )
        with view:
            got = self.call("open_read_only().read_metadata()", view.read_metadata)
            if got != _COMMITTED:
                raise self.fail(
                    "open_read_only()", f"its view's metadata is {got}, expected {_COMMITTED}"
                )
            entries = list(
                self.call("open_read_only().range()", lambda: list(view.range(None, None)))
            )
            if entries != _ENTRIES:
                raise self.fail(
                    "open_read_only()", f"its view holds {entries}, expected {_ENTRIES}"
                )


@contextmanager
def _scratch() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="statekeeper-supplier-probe-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def check_supplier(supplier: object, store_name: str) -> None:
    """Refuse a supplier that breaks the store contract (:class:`StoreContractError`, naming
    the method): it must be a :class:`StoreSupplier`, picklable (it travels to the
    executors), and its stores must stage writes until commit, keep metadata with them,
    restore, discard, wipe and reopen as the layers expect. Run once per supplier object,
    in a scratch directory."""
    if not isinstance(supplier, StoreSupplier):
        raise StoreContractError(
            f"store {store_name!r}: a custom store needs a StoreSupplier, got "
            f"{type(supplier).__name__} (docs/custom-stores.md)"
        )
    with _checked_lock:
        if id(supplier) in _checked:
            return
    probe = _Probe(supplier, store_name)
    try:
        pickle.loads(pickle.dumps(supplier))
    except Exception as exc:
        raise probe.fail(
            "pickling", f"{type(exc).__name__}: {exc}; the supplier travels to the executors"
        ) from exc
    with _scratch() as root:
        probe.run(root)
    key = id(supplier)
    try:
        ref = weakref.ref(supplier, lambda _ref: _checked.pop(key, None))
    except TypeError:  # no weak references (__slots__): probed again next time
        return
    with _checked_lock:
        _checked[key] = ref
