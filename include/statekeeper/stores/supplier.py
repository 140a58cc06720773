"""A user's own store engine: the supplier statekeeper asks for one store per task.

Like Kafka Streams' ``KeyValueBytesStoreSupplier``: the supplier makes the inner store; the
builder wraps it in the same metered → caching → change-logging layers as a built-in one,
so it is logged, restored, snapshotted, standby-replicated and queried the same way
(docs/custom-stores.md). The supplier travels to the Spark executors inside the store's
spec, so it must be picklable: a small frozen dataclass of settings is the usual shape.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

from statekeeper.stores.base import KeyValueBytesStore
from statekeeper.stores.read_only_view import ReadOnlyStoreView


class StoreSupplier(ABC):
    """Makes a task's key-value byte store (also the segments of a custom window store).

    The store it returns implements :class:`~statekeeper.stores.base.KeyValueBytesStore`:
    writes staged until ``commit(metadata)`` makes them durable together with the metadata,
    ``read_metadata`` returning what the last commit wrote, ``restore_batch`` applying
    changelog records (and metadata) directly, ``discard`` dropping staged writes, ``wipe``
    and ``close``. :func:`statekeeper.stores.supplier_contract.check_supplier` probes all of
    that when the store is declared.
    """

    #: Short name of the engine ("sqlite"), shown by ``stores inspect`` and the status, and
    #: part of the topology's fingerprint (changing engines is a change of the app).
    engine: str = "custom"
    #: True when the store keeps its state in files under its directory across restarts
    #: (restored from the changelog tail, snapshotted, queryable); False: in memory,
    #: rebuilt from the whole changelog at every open, like the built-in in-memory store.
    persistent: bool = True

    @abstractmethod
    def get(self, name: str, directory: Path) -> KeyValueBytesStore:
        """Open store ``name`` of one task, creating it when missing. ``directory`` is the
        store's own directory under the task directory (it may not exist yet); a
        persistent store keeps every file there. Raise
        :class:`~statekeeper.errors.StoreCorruptError` when the files cannot be read: the
        task then wipes the directory and restores the store."""

    def open_read_only(self, name: str, directory: Path) -> ReadOnlyStoreView:
        """The last commit of the store in ``directory``, read without writing, restoring
        or locking anything there, while the task may be writing it (drills, ``stores
        inspect``, interactive queries). A supplier without it still runs; those reads
        refuse its stores and say so."""
        raise NotImplementedError(
            f"{type(self).__name__} has no open_read_only(): its stores cannot be read by "
            "drills, `statekeeper stores inspect` or interactive queries "
            "(docs/custom-stores.md)"
        )

    @property
    def has_read_only_view(self) -> bool:
        """Whether this supplier offers :meth:`open_read_only` (else its stores are not
        queryable, drilled or inspected from outside the task)."""
        return type(self).open_read_only is not StoreSupplier.open_read_only

    def describe(self) -> str:
        """One line for fingerprints and listings: the engine and its settings."""
        return f"{self.engine}:{type(self).__name__}"
