"""A directory of symbolic links to a live RocksDB directory, for a secondary to open.

Opening any rocksdict handle, a secondary too, rewrites ``rocksdict-config.json`` in the
directory it opens, and an operator's read must not change a byte or a timestamp of a live
task. So a query view opens its secondary on a mirror: one link per RocksDB file of the
live directory, by name, and its own ``rocksdict-config.json``. A link follows the name, so
the primary's appends to its WAL and MANIFEST and its rename of ``CURRENT`` show through;
files the primary creates later get their links at the next :meth:`LinkMirror.sync`, which
the view runs before each open and catch-up.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

#: Files of the live directory a secondary must not share: the primary's lock and info
#: logs, and the file rocksdict rewrites at every open.
_OWN = ("LOCK", "LOG", "rocksdict-config.json")


def _shared(name: str) -> bool:
    return not name.startswith(_OWN) and not name.endswith(".dbtmp")


class LinkMirror:
    """Links in ``mirror`` to the RocksDB files of ``live`` (see the module docstring)."""

    def __init__(self, live: Path, mirror: Path) -> None:
        self.live = Path(live)
        self.path = Path(mirror)

    def sync(self) -> None:
        """Link every file ``live`` holds now and drop links to files it no longer holds."""
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            names = {n for n in os.listdir(self.live) if _shared(n)}
        except FileNotFoundError:
            names = set()
        linked = {n for n in os.listdir(self.path) if _shared(n)}
        for name in linked - names:
            (self.path / name).unlink(missing_ok=True)
        for name in names - linked:
            with contextlib.suppress(FileExistsError):
                os.symlink(self.live / name, self.path / name)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
