"""A task's id: ``<subtopology>_<partition>``, e.g. ``1_0`` (R1, docs/invariants.md).

The one place that reads and writes the format. Task ids travel as these strings
everywhere (task directory names, status JSON, snapshot manifests, the assignment, commit
markers); :class:`TaskId` is only how code takes one apart or builds one. It lives with the
task directories (``<state_dir>/<app>/<task id>/``), the lowest floor that knows tasks, so
every layer above can parse a task id the same way.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

_FORMAT = re.compile(r"([0-9]+)_([0-9]+)")


@dataclass(frozen=True, order=True)
class TaskId:
    """A task: one subtopology's work on one input partition number.

    Ordered by subtopology, then partition (so ``1_2`` < ``1_10`` < ``2_0``); ``str()``
    gives the id as it is written everywhere.
    """

    subtopology: int
    partition: int

    def __post_init__(self) -> None:
        for name in ("subtopology", "partition"):
            value = getattr(self, name)
            try:
                number = operator.index(value)  # ints, numpy ints; not floats or strings
            except TypeError:
                raise TypeError(f"TaskId {name} must be an integer, got {value!r}") from None
            if number < 0:
                raise ValueError(f"TaskId {name} must not be negative, got {number}")
            object.__setattr__(self, name, number)

    @classmethod
    def parse(cls, text: str) -> TaskId:
        """The task id ``text`` spells (``"1_0"`` -> ``TaskId(1, 0)``); raises
        :class:`ValueError` naming ``text`` when it is not ``<subtopology>_<partition>``
        (two runs of ASCII digits; leading zeros are read as numbers, so ``str()`` of the
        result is the id as statekeeper writes it)."""
        match = _FORMAT.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"task id {text!r} is not <subtopology>_<partition>")
        return cls(int(match[1]), int(match[2]))

    @classmethod
    def try_parse(cls, text: str) -> TaskId | None:
        """:meth:`parse`, or None when ``text`` is not a task id (e.g. a directory name
        that is not a task's)."""
        try:
            return cls.parse(text)
        except ValueError:
            return None

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.partition}"
