"""Which of a RocksDB directory's files a view follows, and a cheap check that none moved.

A view (:mod:`statekeeper.query.copies`) must know, before each answer, whether the primary
wrote since it last followed: every commit appends to a WAL file, a flush or a compaction
moves the MANIFEST, a recreated store has a new IDENTITY. A full scan lists the directory
and stats those files (~100 us with a few dozen SST files, the largest cost of a point get
after HTTP). :meth:`StoreFiles.unchanged` proves "nothing moved" with a few ``stat`` calls
instead: the directory's own times (a file created, removed or renamed in it moves them;
RocksDB replaces CURRENT and IDENTITY by renames) and the WAL files' and the MANIFEST's
sizes and times (the files RocksDB appends to).

The directory's times are only as fine as the filesystem's clock (a kernel tick, or a
whole second on some filesystems), so a file created in the same tick as the scan would
leave them as they were. The check is therefore trusted only after a scan that found the
directory unchanged for ``settle_s`` (default 1.5 s, longer than any such granularity): a
later change then moves its times to a later value. Until then every check is a full scan.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

#: (name, inode, size, mtime_ns) of one followed file.
FileStamp = tuple[str, int, int, int]


@dataclass(frozen=True)
class Files:
    """What the primary's writes move: the WAL files (every commit appends), the MANIFEST
    and CURRENT (flushes and compactions), and IDENTITY's inode (a recreated store).

    Two scans compare equal when those are equal; the directory's stamp is not compared
    (an SST file written or deleted alone changes nothing a view shows)."""

    wal: tuple[FileStamp, ...]
    manifest: tuple[FileStamp, ...]
    identity: tuple[int, int] | None
    #: The directory's (inode, mtime_ns, ctime_ns) read before the listing.
    directory: tuple[int, int, int] | None = field(default=None, compare=False)
    #: The directory had not changed for ``settle_s`` when it was scanned.
    settled: bool = field(default=False, compare=False)


class StoreFiles:
    """The followed files of the store directory ``path`` (see the module docstring)."""

    def __init__(self, path: Path, settle_s: float = 1.5) -> None:
        self.path = Path(path)
        self.settle_ns = int(settle_s * 1e9)

    def scan(self) -> Files:
        """List the directory and stat the followed files."""
        wal: list[FileStamp] = []
        manifest: list[FileStamp] = []
        identity = None
        now_ns = time.time_ns()
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return Files((), (), None)
        directory = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        settled = now_ns - max(st.st_mtime_ns, st.st_ctime_ns) > self.settle_ns
        try:
            with os.scandir(self.path) as entries:
                for entry in entries:
                    name = entry.name
                    if name.endswith(".log"):
                        st = entry.stat()
                        wal.append((name, st.st_ino, st.st_size, st.st_mtime_ns))
                    elif name.startswith(("MANIFEST-", "CURRENT", "IDENTITY")):
                        st = entry.stat()
                        manifest.append((name, st.st_ino, st.st_size, st.st_mtime_ns))
                        if name == "IDENTITY":
                            identity = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            return Files((), (), None)
        return Files(tuple(sorted(wal)), tuple(sorted(manifest)), identity, directory, settled)

    def unchanged(self, seen: Files) -> bool:
        """True when a few ``stat`` calls prove nothing ``seen`` followed moved; False when
        something did or the cheap check cannot tell (then :meth:`scan`)."""
        if not seen.settled or seen.directory is None:
            return False
        try:
            st = os.stat(self.path)
            if (st.st_ino, st.st_mtime_ns, st.st_ctime_ns) != seen.directory:
                return False
            for name, ino, size, mtime_ns in (*seen.wal, *seen.manifest):
                if not name.startswith("MANIFEST-") and not name.endswith(".log"):
                    continue  # CURRENT and IDENTITY are only ever replaced: the directory moves
                st = os.stat(os.path.join(self.path, name))
                if (st.st_ino, st.st_size, st.st_mtime_ns) != (ino, size, mtime_ns):
                    return False
        except FileNotFoundError:
            return False
        return True
