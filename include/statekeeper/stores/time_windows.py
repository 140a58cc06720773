"""Time window definitions: tumbling and hopping windows with a grace period."""

from __future__ import annotations

from dataclasses import dataclass

from statekeeper.errors import InvalidStoreConfigError


@dataclass(frozen=True)
class TimeWindows:
    """Windows of ``size_ms`` starting every ``advance_ms`` (tumbling when advance == size).

    A record is accepted into a window until stream time passes the window end + ``grace_ms``.
    """

    size_ms: int
    advance_ms: int
    grace_ms: int = 0

    @classmethod
    def tumbling(cls, size_ms: int, grace_ms: int = 0) -> TimeWindows:
        return cls(size_ms=size_ms, advance_ms=size_ms, grace_ms=grace_ms)

    @classmethod
    def hopping(cls, size_ms: int, advance_ms: int, grace_ms: int = 0) -> TimeWindows:
        return cls(size_ms=size_ms, advance_ms=advance_ms, grace_ms=grace_ms)

    def __post_init__(self) -> None:
        if self.size_ms <= 0:
            raise InvalidStoreConfigError(f"window size must be > 0 ms, got {self.size_ms}")
        if not 0 < self.advance_ms <= self.size_ms:
            raise InvalidStoreConfigError(
                f"window advance must be in (0, size={self.size_ms}] ms, got {self.advance_ms}"
            )
        if self.grace_ms < 0:
            raise InvalidStoreConfigError(f"grace must be >= 0 ms, got {self.grace_ms}")

    def window_starts(self, timestamp_ms: int) -> list[int]:
        """Starts of every window that contains ``timestamp_ms``, oldest first."""
        last_start = timestamp_ms - timestamp_ms % self.advance_ms
        first_start = max(0, timestamp_ms - self.size_ms + 1)
        starts = []
        start = last_start
        while start >= first_start:
            starts.append(start)
            start -= self.advance_ms
        starts.reverse()
        return starts


def validate_retention(store: str, retention_ms: int, windows_size_ms: int, grace_ms: int) -> None:
    """Invariant 7: a window must outlive its size plus grace, or late records find it gone."""
    if retention_ms < windows_size_ms + grace_ms:
        raise InvalidStoreConfigError(
            f"window store {store!r}: retention {retention_ms} ms is smaller than window size "
            f"{windows_size_ms} ms + grace {grace_ms} ms = {windows_size_ms + grace_ms} ms; "
            "raise the retention (with_retention) or shrink size/grace"
        )
