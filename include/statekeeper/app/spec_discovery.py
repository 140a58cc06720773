"""Where app specs are found: the specs folder (``$STATEKEEPER_SPECS_DIR``), its spec
files, an app id resolved to its spec, and a field read without validating the rest."""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterator
from pathlib import Path

import yaml

#: The folder of app specs the DAGs act on and ``--app APP_ID`` looks in.
SPECS_DIR_ENV = "STATEKEEPER_SPECS_DIR"
#: The repo's shipped apps (for a checkout or an editable install).
DEFAULT_SPECS_DIR = Path(__file__).resolve().parents[3] / "spark_apps"
SPEC_SUFFIXES = (".yaml", ".yml", ".toml")


def specs_dir() -> Path:
    """The folder of app specs: ``$STATEKEEPER_SPECS_DIR``, else the repo's spark_apps/."""
    return Path(os.environ.get(SPECS_DIR_ENV) or DEFAULT_SPECS_DIR)


def spec_files(folder: Path) -> Iterator[Path]:
    """The spec files one level below ``folder`` (``<folder>/*/*.yaml|yml|toml``), sorted."""
    yield from sorted(p for p in folder.glob("*/*") if p.suffix in SPEC_SUFFIXES)


def peek_field(path: Path, field: str) -> str | None:
    """The string a spec file gives the top-level ``field``, without validating the rest
    (None when it gives none, or the file cannot be read or parsed)."""
    try:
        text = path.read_text()
        raw = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError):
        return None
    value = raw.get(field) if isinstance(raw, dict) else None
    return value if isinstance(value, str) else None


def peek_application_id(path: Path) -> str | None:
    """The ``application_id`` a spec file declares, without validating the rest (None when
    the file cannot be read or parsed)."""
    return peek_field(path, "application_id")


def find_spec(app: str, folder: Path | None = None) -> Path | None:
    """The spec file of ``app``: a spec path (an existing file, or a name ending in .yaml,
    .yml or .toml), else the spec in ``folder`` (default :func:`specs_dir`) whose
    ``application_id`` is ``app``; None when there is none."""
    candidate = Path(app)
    if candidate.is_file() or candidate.suffix in SPEC_SUFFIXES:
        return candidate
    folder = folder or specs_dir()
    if not folder.is_dir():
        return None
    for path in spec_files(folder):
        if peek_application_id(path) == app:
            return path
    return None
