"""Which process: a pid, its start time and the machine's boot, so a reused pid is never
taken for the process that had it.

The kernel reuses pids. A process is named by its pid *and* its start time
(``/proc/<pid>/stat`` field 22, clock ticks since boot), and start times compare only within
one boot, so the boot id goes with them. Every record of a process this library started (the
platform's PID files, the local cluster's ``cluster.json``, the embedded broker's
``broker.json``, a supervised app's launch) holds a :class:`ProcessIdentity`, and nothing
signals a pid whose identity no longer matches. Linux only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from enum import Enum
from typing import Any, Self

from statekeeper.procfs import boot_id, proc_stat

#: The start ticks of a process already gone when its identity was read: never alive.
NO_START = -1


class Liveness(Enum):
    """What became of an identified process (:meth:`ProcessIdentity.liveness`); the values
    read after "pid <n>"."""

    RUNNING = "running"
    ZOMBIE = "exited (zombie)"  # exited; its parent has not collected its exit status yet
    EXITED = "exited"  # no process holds the pid
    PID_REUSED = "exited (the pid now belongs to another process)"
    OTHER_BOOT = "recorded on another boot"


@dataclass(frozen=True)
class ProcessIdentity:
    """One process, to find again later or from another process: ``pid`` with its start
    time (``start_ticks``) on the machine's boot ``boot_id``."""

    pid: int
    start_ticks: int
    boot_id: str

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity:
        """``pid`` as ``/proc`` shows it now (a pid no process holds gets :data:`NO_START`)."""
        stat = proc_stat(pid)
        return cls(pid, stat.start_ticks if stat is not None else NO_START, boot_id())

    @property
    def local(self) -> bool:
        """Recorded on this boot of this machine: only then do its pid and start time mean
        something here."""
        return self.boot_id == boot_id()

    def liveness(self) -> Liveness:
        """Whether the process runs, and if not, what holds its pid now."""
        if not self.local:
            return Liveness.OTHER_BOOT
        stat = proc_stat(self.pid)
        if stat is None:
            return Liveness.EXITED
        if stat.start_ticks != self.start_ticks:
            return Liveness.PID_REUSED
        return Liveness.RUNNING if stat.running else Liveness.ZOMBIE

    def alive(self) -> bool:
        """True while this very process runs: same pid, same start time, same boot."""
        return self.liveness() is Liveness.RUNNING

    def group_may_be_signalled(self) -> bool:
        """The process group this process leads (its id is the pid) may be signalled: the
        pid is held by this process or by none. The kernel hands out no pid while a process
        group of that id has members, so a gone leader's group is still its own; a pid held
        by another process (or recorded on another boot) is not."""
        return self.liveness() in (Liveness.RUNNING, Liveness.ZOMBIE, Liveness.EXITED)

    def to_json(self) -> dict[str, Any]:
        """``{"pid", "start_ticks", "boot_id"}``."""
        return asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ProcessIdentity:
        """The identity in ``doc`` (its ``pid``, ``start_ticks`` and ``boot_id``; other keys,
        such as a record's own fields, are ignored). A record written before boot ids were
        kept has no ``boot_id``: it was compared by start ticks alone, and is read as of this
        boot, as it was then."""
        recorded_boot = doc.get("boot_id")
        return cls(
            int(doc["pid"]),
            int(doc["start_ticks"]),
            boot_id() if recorded_boot is None else str(recorded_boot),
        )


class HoldsProcessIdentity:
    """For a dataclass recording one started process in its ``process`` field: the
    process's ``pid``, and JSON that puts the identity's keys beside the record's own
    fields (the flat format these records have always been written in, so a record
    written before identities existed still reads)."""

    process: ProcessIdentity

    @property
    def pid(self) -> int:
        """The recorded process's pid."""
        return self.process.pid

    def to_json(self) -> dict[str, Any]:
        """The record's fields, with ``pid``, ``start_ticks`` and ``boot_id`` for its process."""
        own = asdict(self)
        del own["process"]
        return {**self.process.to_json(), **own}

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Self:
        """The record in ``doc`` (see :meth:`to_json`); keys it does not know are ignored."""
        own = {f.name for f in fields(cls)} - {"process"}
        return cls(
            process=ProcessIdentity.from_json(doc), **{k: v for k, v in doc.items() if k in own}
        )
