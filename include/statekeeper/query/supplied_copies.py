"""Query views of custom stores (docs/custom-stores.md): the supplier's read-only view.

A RocksDB store is followed by a secondary instance (:mod:`statekeeper.query.copies`); a
custom engine offers only ``StoreSupplier.open_read_only``, a view of one commit that says
whether it is still current (:meth:`ReadOnlyStoreView.is_current`). So this copy checks that
before each answer and opens a new view when the store has committed since, swapping it in
under the same read/write lock and staleness rule as :class:`~statekeeper.query.copies.
StoreCopy`: answers show a commit that was the task's last at most ``max_staleness_s``
before the query arrived.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from statekeeper.errors import StoreCorruptError
from statekeeper.query.copies import (
    CopyReader,
    CopyState,
    CopyUnavailableError,
    ReadWouldWaitError,
    ReadWriteLock,
    enter_refresh,
)
from statekeeper.stores.builders import StoreSpec
from statekeeper.stores.read_only_view import ReadOnlyStoreView
from statekeeper.stores.window_bytes import WindowBytesStore


class ViewKeyValueReader:
    """The read side of a custom store's view, as the query server and
    :class:`WindowBytesStore` read it (``get``, ``range``, ``after``, the count)."""

    persistent = True

    def __init__(self, view: ReadOnlyStoreView) -> None:
        self._view = view

    def get(self, key: bytes) -> bytes | None:
        return self._view.get(key)

    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        return self._view.range(start, end, reverse=reverse)

    def after(self, start: bytes | None, exclusive: bool) -> Iterator[tuple[bytes, bytes]]:
        """Entries from ``start`` on (past it when ``exclusive``), to the end."""
        for key, value in self._view.range(start, None):
            if exclusive and key == start:
                continue
            yield key, value

    def approximate_num_entries(self) -> int:
        return self._view.approximate_num_entries()


class SuppliedStoreCopy:
    """A query view of one task's custom store (module docstring); the interface of
    :class:`~statekeeper.query.copies.StoreCopy`."""

    def __init__(self, spec: StoreSpec, path: Path, max_staleness_s: float = 0.25) -> None:
        assert spec.supplier is not None
        self.spec = spec
        self.name = spec.name
        self.path = Path(path)
        self.max_staleness_s = max_staleness_s
        self._lock = ReadWriteLock()
        self._refresh_mutex = threading.Lock()
        self._view: ReadOnlyStoreView | None = None
        self._state = CopyState(None, None)
        self._window: WindowBytesStore | None = None
        self._current_at = float("-inf")
        self.catch_ups = 0  # a view is never caught up, only reopened
        self.reopens = 0
        self._closed = False

    def refresh(self, wait: bool = True) -> None:
        """Open a new view when the store committed since this one's commit (see
        :meth:`statekeeper.query.copies.StoreCopy.refresh` for ``wait`` and the staleness
        rule). Raises :class:`CopyUnavailableError` when there is no readable copy."""
        if not enter_refresh(
            self._refresh_mutex,
            self._view is not None,
            self._current_at,
            self.max_staleness_s,
            wait,
            self.name,
        ):
            return
        try:
            if self._closed:
                raise CopyUnavailableError(f"view of {self.name} is closed")
            checked_at = time.monotonic()
            if self._view is not None and self._view.is_current():
                self._current_at = checked_at
                return
            if not wait:
                raise ReadWouldWaitError(f"the view of {self.name} must follow the task")
            if not self.path.is_dir():
                self._swap(None)
                raise CopyUnavailableError(f"no copy of store {self.name} at {self.path}")
            try:
                view = self.spec.supplier.open_read_only(self.name, self.path)  # type: ignore[union-attr]
            except (StoreCorruptError, OSError, NotImplementedError) as exc:
                self._swap(None)
                raise CopyUnavailableError(f"store {self.name} at {self.path}: {exc}") from exc
            self._swap(view)
            self.reopens += 1
            self._current_at = checked_at
        finally:
            self._refresh_mutex.release()

    def _swap(self, view: ReadOnlyStoreView | None) -> None:
        state, window = CopyState(None, None), None
        if view is not None:
            state = CopyState.of(view.read_metadata())
            spec = self.spec
            if spec.kind == "window":
                assert spec.retention_ms is not None and spec.window_size_ms is not None
                window = WindowBytesStore(
                    spec.name,
                    ViewKeyValueReader(view),  # type: ignore[arg-type]
                    retention_ms=spec.retention_ms,
                    window_size_ms=spec.window_size_ms,
                )
        with self._lock.exclusive():
            old, self._view = self._view, view
            self._state, self._window = state, window
        if old is not None:
            old.close()

    @contextmanager
    def reading(self, wait: bool = True) -> Iterator[CopyReader]:
        """A consistent read of the view (no swap until the block ends)."""
        with self._lock.shared(wait):
            view = self._view
            if view is None:
                raise CopyUnavailableError(f"no readable copy of store {self.name} here")
            yield CopyReader(ViewKeyValueReader(view), self._state, self._window)  # type: ignore[arg-type]

    @property
    def state(self) -> CopyState:
        return self._state

    def close(self) -> None:
        with self._refresh_mutex:
            self._closed = True
            self._swap(None)
