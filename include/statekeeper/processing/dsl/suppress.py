"""Suppressed: emit a windowed table's result only once its window has closed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Suppressed:
    """``Suppressed.until_window_closes()``: one final result per window, emitted when stream
    time reaches window end + grace. The buffer store is named ``<name>-store`` when a name
    is given (Kafka Streams' convention), else it gets a generated name."""

    name: str | None = None

    @classmethod
    def until_window_closes(cls, name: str | None = None) -> Suppressed:
        return cls(name=name)

    def with_name(self, name: str) -> Suppressed:
        return dataclasses.replace(self, name=name)
