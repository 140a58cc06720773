"""Python's garbage collector in a Spark worker while statekeeper tasks run.

Two costs, both measured on the throughput benchmark (12.5k-record tasks, two per worker):

- A batch allocates millions of short-lived objects; at Python's generation-0 threshold of
  700, collections took ~20 ms of every task. :func:`raised_gc_threshold` raises it while
  our tasks run and puts it back after.
- A reused Spark Python worker runs a *full* ``gc.collect()`` after every task
  (``pyspark/daemon.py``). With Spark's modules and the tasks parked between batches, that
  scan took ~40 ms of CPU per worker per batch, about a tenth of the batch's CPU.
  :func:`frozen_after_share` moves everything alive at the end of our Spark task into
  Python's permanent generation (``gc.freeze``), so that scan finds almost nothing, and
  unfreezes it when the next share starts, so the generational collector still sees it.
  Every ``full_every``-th share is left unfrozen: Spark's full scan then runs as usual, so
  cyclic garbage lives at most that many batches. Reference counting frees everything else
  as always; freezing only hides objects from the cycle collector.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
from collections.abc import Iterator

_shares = itertools.count(1)


@contextlib.contextmanager
def raised_gc_threshold(threshold: int) -> Iterator[None]:
    """Python's generation-0 GC threshold raised while our tasks run (0: unchanged), and put
    back after: the worker process is Spark's and runs other Python code too."""
    before = gc.get_threshold()
    if threshold:
        gc.set_threshold(threshold, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)


@contextlib.contextmanager
def frozen_after_share(full_every: int, *, in_spark_worker: bool) -> Iterator[None]:
    """Unfreeze on entry; on exit freeze what is alive, except every ``full_every``-th time
    (0: never freeze). Only inside a Spark worker (``in_spark_worker``): elsewhere nobody
    runs a full collection after each call, so there is nothing to save."""
    if not in_spark_worker or full_every <= 0:
        yield
        return
    gc.unfreeze()
    try:
        yield
    finally:
        if next(_shares) % full_every:
            gc.freeze()


def in_spark_task() -> bool:
    """Whether this code runs inside a Spark task (a Python worker), not on the driver or in
    a test calling the runner directly."""
    try:
        from pyspark import TaskContext
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return False
    return TaskContext.get() is not None
