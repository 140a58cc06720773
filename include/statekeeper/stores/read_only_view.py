"""What operator reads and queries need of a store opened read-only from another process."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

from statekeeper.stores.base import StoreMetadata


class ReadOnlyStoreView(ABC):
    """One committed state of a store's files, read without writing, restoring or locking
    anything in its directory (drills, ``stores inspect``, queries; invariant 9 in
    docs/invariants.md).

    A view shows the store as of one commit: data and metadata agree. It never changes
    under its reader; :meth:`is_current` tells whether the live files have moved on, and a
    reader that wants newer state opens a new view.
    """

    name: str
    persistent = True

    @abstractmethod
    def get(self, key: bytes) -> bytes | None: ...

    @abstractmethod
    def range(
        self, start: bytes | None, end: bytes | None, *, reverse: bool = False
    ) -> Iterator[tuple[bytes, bytes]]:
        """Entries with ``start <= key <= end`` (None: unbounded), in key order."""

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every entry, in key order."""
        return self.range(None, None)

    @abstractmethod
    def approximate_num_entries(self) -> int: ...

    @abstractmethod
    def read_metadata(self) -> StoreMetadata:
        """The metadata of the commit the view shows (all None/empty: never committed)."""

    def is_current(self) -> bool:
        """Whether the live files still hold the commit this view shows (False: unknown,
        open a new view to be sure)."""
        return False

    @abstractmethod
    def close(self) -> None:
        """Release the view (and whatever private copy it read from)."""

    def __enter__(self) -> ReadOnlyStoreView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
