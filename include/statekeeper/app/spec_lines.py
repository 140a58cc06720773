"""Where each key of an app spec file is, by line: YAML keeps marks, TOML (tomllib) keeps
none, so its lines are found by reading the text. Messages name ``file:line``."""

from __future__ import annotations

import re
from pathlib import Path

import yaml


class SpecSource:
    """Where an app spec came from: its file and the line of each key (for messages)."""

    def __init__(self, path: Path, lines: dict[tuple[str, ...], int]) -> None:
        self.path = path
        self.lines = lines

    def where(self, *key: str) -> str:
        """``at <file>:<line>`` of ``key`` (or of its nearest enclosing key), else
        ``in <file>``."""
        for end in range(len(key), 0, -1):
            line = self.lines.get(tuple(key[:end]))
            if line is not None:
                return f"at {self.path}:{line}"
        return f"in {self.path}"


def yaml_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line (1-based) of every mapping key and sequence item of a YAML document."""
    lines: dict[tuple[str, ...], int] = {}

    def walk(node: yaml.Node, path: tuple[str, ...]) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                at = (*path, str(key.value))
                lines[at] = key.start_mark.line + 1
                walk(value, at)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                at = (*path, str(i))
                lines[at] = item.start_mark.line + 1
                walk(item, at)

    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        walk(root, ())
    return lines


_TOML_TABLE = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_TOML_BARE = r"""(?:"[^"]*"|'[^']*'|[A-Za-z0-9_-]+)"""
_TOML_KEY = re.compile(rf"^\s*({_TOML_BARE}(?:\s*\.\s*{_TOML_BARE})*)\s*=")
_TOML_PART = re.compile(r""""([^"]*)"|'([^']*)'|([A-Za-z0-9_-]+)""")


def _toml_parts(dotted: str) -> tuple[str, ...]:
    return tuple(next(g for g in m.groups() if g is not None) for m in _TOML_PART.finditer(dotted))


def toml_lines(text: str) -> dict[tuple[str, ...], int]:
    """The line (1-based) of every table and key of a TOML document (tomllib keeps none):
    ``[a.b]`` headers and ``key = value`` lines; keys of inline tables and multi-line
    values map to their enclosing key."""
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    for number, line in enumerate(text.splitlines(), 1):
        header = _TOML_TABLE.match(line)
        if header:
            table = _toml_parts(header[1])
            lines.setdefault(table, number)
            continue
        key = _TOML_KEY.match(line)
        if key:
            lines.setdefault((*table, *_toml_parts(key[1])), number)
    return lines
