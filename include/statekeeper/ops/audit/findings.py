"""One audit finding and the verdict a list of them gives."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Severity = Literal["info", "unknown", "warn", "fail"]
Verdict = Literal["ok", "warn", "fail"]


@dataclass(frozen=True)
class Finding:
    """What the audit found about one aspect (a config, the partition count, ...) of a topic.

    ``severity``: ``info`` and ``unknown`` (the broker did not report a config: broker
    default, value unknown) never lower the verdict; ``warn`` and ``fail`` do.
    ``fix`` is the config value that would correct it, when changing it is safe.
    """

    aspect: str
    severity: Severity
    message: str
    fix: str | None = None


def verdict_of(findings: Iterable[Finding]) -> Verdict:
    """``fail`` if any finding fails, else ``warn`` if any warns, else ``ok``."""
    severities = {f.severity for f in findings}
    if "fail" in severities:
        return "fail"
    if "warn" in severities:
        return "warn"
    return "ok"
