"""TimeWindowedKStream: count / reduce / aggregate per key and time window."""

from __future__ import annotations

from statekeeper.processing.dsl.grouped import KGroupedStream, _Aggregations
from statekeeper.stores.time_windows import TimeWindows


class TimeWindowedKStream(_Aggregations):
    """A grouped stream cut into windows; aggregations give a table keyed by
    :class:`~statekeeper.processing.windowed_key.Windowed`, kept in a window store (retention
    defaults to size + grace; ``Materialized.with_retention`` raises it)."""

    def __init__(self, grouped: KGroupedStream, windows: TimeWindows) -> None:
        if not isinstance(windows, TimeWindows):
            raise TypeError(f"windowed_by() needs TimeWindows, got {type(windows).__name__}")
        self._grouped = grouped
        self._builder = grouped._builder
        self.windows = windows

    def _source(self) -> tuple[KGroupedStream, TimeWindows | None]:
        return self._grouped, self.windows
