"""Errors of the topology layer: bad topologies, and records that belong in the DLQ."""

from __future__ import annotations

from statekeeper.errors import ConfigError


class TopologyError(ConfigError):
    """A topology that cannot run (unknown store, windowed key without serde, ...)."""


class CopartitioningError(TopologyError):
    """Topics read by one subtopology have different partition counts."""


class InvalidRecordError(ValueError):
    """Raise from a processor (before any side effect) to send the current input record to
    the dead-letter topic with ``sk.error.type = invalid-record``; processing continues."""


class NullKeyError(InvalidRecordError):
    """A record without a key reached an operation that needs one (aggregation, join)."""
