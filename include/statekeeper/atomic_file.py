"""Replacing a small file atomically: a reader sees the old text or the new, never half."""

from __future__ import annotations

import os
import threading
from pathlib import Path


def replace_text(path: Path | str, text: str, *, durable: bool = False) -> Path:
    """Write ``text`` to a temporary file beside ``path`` (its folder created if missing),
    then rename it over ``path``. ``durable``: fsync the text before the rename, for a
    record a crash must not lose once written (a takeover, a fill's pending mark). The
    temporary name carries the process and thread, so concurrent writers never share it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(temp, "w", encoding="utf-8") as out:
            out.write(text)
            if durable:
                out.flush()
                os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return path
