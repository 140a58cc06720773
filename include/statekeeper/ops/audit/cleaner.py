"""Log-cleaner tuning of a changelog, where the broker compacts (pure logic, no broker).

- ``min.cleanable.dirty.ratio``: the cleaner starts once this share of the log is dirty, so
  a full restore replays up to ~1/(1 - ratio) times the live records. When the measured
  superseded share is at or above the ratio (the log is mostly dead records), lower it.
- ``segment.ms``: the active segment is never cleaned, so everything written within the
  last ``segment.ms`` stays uncompacted; Kafka's default is 7 days.
- ``min.compaction.lag.ms``: the commit protocol needs it (tests/unit/state/
  test_compaction_safety.py). A crashed attempt's uncommitted record may supersede the
  committed value of its key; if the cleaner drops that value before the task's next open
  re-logs it, and the open has no local copy at the last marker (in-memory stores never
  have one), the committed value is lost. A lag longer than the longest outage keeps the
  cleaner off a crashed attempt's records until the next open settled them.

On a broker that does not compact (the embedded one) none of this has an effect: one info
finding says so, and restores are bounded by snapshots only.
"""

from __future__ import annotations

from collections.abc import Mapping

from statekeeper.ops.audit.findings import Finding
from statekeeper.stores.builders import CHANGELOG_MIN_COMPACTION_LAG_MS

#: What ``--fix`` sets the dirty ratio to when the log is mostly superseded records.
TUNED_DIRTY_RATIO = "0.1"
KAFKA_DEFAULT_DIRTY_RATIO = 0.5
#: Longest segment.ms for a changelog: a day of writes at most escapes compaction.
MAX_SEGMENT_MS = 24 * 60 * 60 * 1000
#: min.compaction.lag.ms ``--fix`` sets (what new changelogs get): an outage up to a day
#: cannot lose committed state.
MIN_COMPACTION_LAG_MS = CHANGELOG_MIN_COMPACTION_LAG_MS


def check_cleaner(
    configs: Mapping[str, str | None],
    *,
    compacts: bool,
    superseded_share: float | None = None,
    retention_ms: int | None = None,
) -> list[Finding]:
    """Cleaner findings for one changelog (``retention_ms``: a window changelog's)."""
    if not compacts:
        return [
            Finding(
                "compaction",
                "info",
                "the broker does not compact: cleaner configs have no effect, the changelog "
                "grows and only snapshots bound restores",
            )
        ]
    return [
        *_dirty_ratio(configs.get("min.cleanable.dirty.ratio"), superseded_share),
        *_segment_ms(configs.get("segment.ms"), retention_ms),
        _compaction_lag(configs.get("min.compaction.lag.ms")),
    ]


def _number(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _dirty_ratio(value: str | None, superseded: float | None) -> list[Finding]:
    ratio = _number(value)
    effective = KAFKA_DEFAULT_DIRTY_RATIO if ratio is None else ratio
    if superseded is None or superseded < effective or effective <= float(TUNED_DIRTY_RATIO):
        return []
    return [
        Finding(
            "min.cleanable.dirty.ratio",
            "warn",
            f"{superseded:.0%} of the records read are superseded and the cleaner waits for "
            f"{effective:g} dirty: a full restore replays them; lower it to "
            f"{TUNED_DIRTY_RATIO}",
            fix=TUNED_DIRTY_RATIO,
        )
    ]


def _segment_ms(value: str | None, retention_ms: int | None) -> list[Finding]:
    wanted = min(MAX_SEGMENT_MS, retention_ms) if retention_ms else MAX_SEGMENT_MS
    segment = _number(value)
    if segment is None:
        return [Finding("segment.ms", "unknown", f"not reported; expected <= {wanted} ms")]
    if segment <= wanted:
        return []
    return [
        Finding(
            "segment.ms",
            "warn",
            f"{value} ms: records of the active segment are never compacted; expected <= "
            f"{wanted} ms",
            fix=str(wanted),
        )
    ]


def _compaction_lag(value: str | None) -> Finding:
    lag = _number(value)
    if lag is not None and lag >= MIN_COMPACTION_LAG_MS:
        return Finding("min.compaction.lag.ms", "info", f"{value} ms")
    shown = "not reported (broker default 0)" if value is None else f"{value} ms"
    return Finding(
        "min.compaction.lag.ms",
        "warn",
        f"{shown}: the cleaner may drop a committed value superseded by a crashed attempt's "
        "uncommitted record before the task's next open re-logs it (lost when that open "
        f"has no local copy); set >= the longest outage, e.g. {MIN_COMPACTION_LAG_MS} ms",
        fix=str(MIN_COMPACTION_LAG_MS),
    )
