"""Helpers of the failover benchmark's "host frozen" scenario (``failover_bench.py``).

A frozen host (``LocalSparkCluster.freeze_worker``: SIGSTOP of every process of a worker)
is noticed only through timeouts, so the scenario reports the steps between the freeze and
the first batch on the survivor: when the driver's log first said the executor was lost
(:class:`LostExecutorWatch`), which Spark network confs the app's executors were started
with (:func:`executor_network_conf`), and, after the thaw, whether the store still holds
exactly the counts the input implies (:func:`verify_counts`).
"""

from __future__ import annotations

import os
import random
import re
import time
from pathlib import Path
from typing import Any

#: Spark's driver log lines saying an executor is lost (heartbeat timeout, scheduler,
#: standalone master), for executor ``{0}``.
EXECUTOR_LOST_PATTERNS = (
    r"Removing executor {0} with no recent heartbeats",
    r"Lost executor {0} ",
    r"Executor app-[0-9-]+/{0} removed",
)


class LostExecutorWatch:
    """Follows the app's log from where it is now: the first time a line saying
    ``executor`` is lost appeared (seen by polling, so within one poll of it)."""

    def __init__(self, log: Path, executor: str) -> None:
        self.log, self.executor = log, executor
        self.offset = log.stat().st_size if log.exists() else 0
        self.patterns = [re.compile(p.format(re.escape(executor))) for p in EXECUTOR_LOST_PATTERNS]
        self.first_seen: float | None = None
        self.lines: list[str] = []
        self._partial = b""

    def poll(self) -> None:
        """Read what the log gained since the last poll."""
        try:
            with open(self.log, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(4 << 20)  # bounded per poll; the rest comes next time
        except OSError:
            return
        self.offset += len(chunk)
        *complete, self._partial = (self._partial + chunk).split(b"\n")
        for raw in complete:
            line = raw.decode(errors="replace")
            if any(p.search(line) for p in self.patterns):
                if self.first_seen is None:
                    self.first_seen = time.time()
                if len(self.lines) < 5:
                    self.lines.append(line[:300])


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds ``pid`` has used; None once it is gone (or a zombie)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_busy(
    pid: int, min_cpu_s: float = 0.01, window_s: float = 0.05, timeout_s: float = 20.0
) -> float | None:
    """Wait (at most ``timeout_s``) until ``pid`` used ``min_cpu_s`` of CPU within one
    ``window_s``: the Python worker is in the middle of a batch's work. Returns the CPU
    seconds of that window, or None at the deadline (or when ``pid`` is gone)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        before = cpu_seconds(pid)
        time.sleep(window_s)
        after = cpu_seconds(pid)
        if before is None or after is None:
            return None
        if after - before >= min_cpu_s:
            return round(after - before, 3)
    return None


class ZombieWatch:
    """A frozen Python worker after the thaw: the CPU it used from the thaw on and how long
    it lived (it runs on with its stale view until its executor is ended)."""

    def __init__(self, pid: int | None, thawed_at: float) -> None:
        self.pid, self.thawed_at = pid, thawed_at
        self.start = cpu_seconds(pid) if pid else None
        self.last = self.start
        self.gone_at: float | None = None

    def poll(self) -> None:
        if self.pid is None or self.gone_at is not None:
            return
        now = cpu_seconds(self.pid)
        if now is None:
            self.gone_at = time.time()
        else:
            self.last = now

    def report(self) -> dict[str, Any]:
        used = self.last - self.start if self.start is not None and self.last is not None else None
        return {
            "pid": self.pid,
            "cpu_after_thaw_s": round(used, 3) if used is not None else None,
            # None: still alive at the last look.
            "lived_after_thaw_s": (
                round(self.gone_at - self.thawed_at, 2) if self.gone_at is not None else None
            ),
        }


def executor_network_conf(work_dir: str) -> dict[str, str]:
    """``spark.network.*`` and ``spark.rpc.*`` options of the newest app's executors on a
    worker, from the launch command Spark writes at the top of each executor's stderr.

    Spark starts executors with the driver's "startup" confs (these prefixes) on their
    command line; the heartbeat settings are fetched later and are not shown there."""
    apps = [p for p in Path(work_dir).glob("app-*") if p.is_dir()]
    if not apps:
        return {}
    newest = max(apps, key=lambda p: p.name)  # app-<yyyyMMddHHmmss>-<nnnn>
    found: dict[str, str] = {}
    for stderr in sorted(newest.glob("*/stderr")):
        try:
            with open(stderr, errors="replace") as f:
                head = f.read(64 << 10)
        except OSError:
            continue
        for key, value in re.findall(r'"-D(spark\.(?:network|rpc)\.[^=" ]+)=([^"]*)"', head):
            found[key] = value
    return found


def expected_counts(keys: int, trickle_updates: int, seed: int = 7) -> list[int]:
    """Per key index, the count the app must hold: 1 (the load) + the trickle's updates.

    The trickle draws its keys from ``random.Random(seed)`` in order, one per record
    produced, so its first ``trickle_updates`` draws are the updates it sent."""
    counts = [1] * keys
    rng = random.Random(seed)
    for _ in range(trickle_updates):
        counts[rng.randrange(keys)] += 1
    return counts


def verify_counts(
    spec_path: Path,
    overrides: dict[str, Any],
    rebuilt_dir: Path,
    store: str,
    expected: list[int],
    key_of: Any,
) -> dict[str, Any]:
    """Rebuild ``store`` from its changelog in a fresh directory (the restore path, with
    its fencing) and compare it with ``expected`` (per key index). Reads the broker only;
    the app may still run."""
    from statekeeper.app.spec import load_app_spec
    from statekeeper.app.store_reader import read_store

    started = time.monotonic()
    spec = load_app_spec(spec_path)
    settings = spec.resolved_settings(**overrides).model_copy(
        update={"state_dir": rebuilt_dir, "restore_from_snapshots": False}
    )
    rebuilt = read_store(settings, spec.build_topology(), store, 1)
    wrong, examples = 0, []
    for i, count in enumerate(expected):
        got = rebuilt.pop(key_of(i), None)
        if got != count:
            wrong += 1
            if len(examples) < 5:
                examples.append({"key": key_of(i), "expected": count, "store": got})
    unexpected = len(rebuilt)  # keys left that the input never had
    return {
        "correct": wrong == 0 and unexpected == 0,
        "keys_expected": len(expected),
        "records_expected": sum(expected),
        "keys_wrong_or_missing": wrong,
        "keys_unexpected": unexpected,
        "examples": examples,
        "seconds": round(time.monotonic() - started, 1),
        "method": "store rebuilt from its changelog (fenced restore) vs load + trickle",
    }
