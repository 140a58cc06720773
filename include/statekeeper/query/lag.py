"""How far a standby copy is behind its changelog, when the standby component cannot say.

The copy's metadata holds the offset of the commit marker it was last brought to; records
after it are what it has not applied yet: ``lag = log end - marker offset - 1``. The log end
is read, not taken from the high watermark, which trails it on some brokers
(:class:`~statekeeper.kafka.offsets.LogEndReader`). Ends are cached for ``ttl_s``; a broker
that does not answer is left alone for ``retry_s`` (answers then carry ``"lag": null``).
"""

from __future__ import annotations

import logging
import threading
import time

from statekeeper.kafka.adapter import consumer_config
from statekeeper.kafka.offsets import LogEndReader

log = logging.getLogger("statekeeper.query")


class ChangelogLag:
    """Lag of a copy from its changelog partition's end (see the module docstring)."""

    def __init__(
        self,
        bootstrap_servers: str,
        timeout_s: float = 2.0,
        ttl_s: float = 1.0,
        retry_s: float = 5.0,
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout_s = timeout_s
        self.ttl_s = ttl_s
        self.retry_s = retry_s
        self._reader = LogEndReader(consumer_config(bootstrap_servers), timeout_s)
        self._ends: dict[tuple[str, int], tuple[float, int]] = {}
        self._lock = threading.Lock()
        self._failed_at = float("-inf")

    def lag(self, topic: str, partition: int, marker_offset: int | None) -> int | None:
        """Records of ``topic[partition]`` after ``marker_offset``; None when unknown."""
        if marker_offset is None:
            return None
        end = self._end(topic, partition)
        return None if end is None else max(0, end - marker_offset - 1)

    def _end(self, topic: str, partition: int) -> int | None:
        now = time.monotonic()
        with self._lock:
            cached = self._ends.get((topic, partition))
            if cached is not None and now - cached[0] < self.ttl_s:
                return cached[1]
            if now - self._failed_at < self.retry_s:
                return None
            try:
                end = self._reader.read([(topic, partition)])[(topic, partition)]
            except Exception as exc:  # noqa: BLE001 - a lag estimate; the answer goes on
                log.info("query: changelog end of %s[%d] unknown: %s", topic, partition, exc)
                self._failed_at = now
                return None
            self._ends[(topic, partition)] = (now, end)
            return end

    def close(self) -> None:
        with self._lock:
            self._reader.close()
