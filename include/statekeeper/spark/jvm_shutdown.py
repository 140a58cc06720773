"""A graceful stop when the signal reaches the driver JVM rather than the Python driver.

Launched as ``spark-submit app.py``, the JVM (SparkSubmit) is the parent and the Python
driver its child. A SIGTERM to spark-submit (a supervisor, ``kill <pid>``) starts the JVM's
shutdown hooks, and Spark's hook stops the SparkContext under the Python driver, which then
dies in the middle of its batch. This module registers, from the Python driver, a JVM
shutdown hook that runs *before* Spark's: its ``Runnable`` is a py4j callback into this
process that asks the app to stop gracefully and blocks until the app has finished its
batch, committed and stopped its query, bounded by ``wait_s``. Spark's hooks then run as
usual.

Ordering: Spark registers all its hooks as one hook in Hadoop's
``org.apache.hadoop.util.ShutdownHookManager`` at priority
``FileSystem.SHUTDOWN_HOOK_PRIORITY + 30`` (40, in ``SparkShutdownHookManager.install``);
Hadoop runs its hooks one after the other, highest priority first, each with its own
timeout, so a hook of :data:`HOOK_PRIORITY` runs and ends before Spark's starts (checked
by experiment on pyspark 4.2: a Spark job ran inside the hook, and the SparkContext was
stopped only after the hook returned).

When Python is the parent (``statekeeper app run``, ``python -m statekeeper.app.launcher``,
tests) the signal reaches Python first and the app's own SIGTERM handler stops it; no hook
is registered then.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger("statekeeper.app")

#: Hadoop shutdown-hook priority of the stop hook: above Spark's 40, so it runs first.
HOOK_PRIORITY = 100
#: The JVM gives the hook this much longer than the Python side waits, so the Python side
#: times out first and says so.
JVM_TIMEOUT_MARGIN_S = 5.0
#: After a shutdown called the hook, the Python driver exits only once the JVM has (or after
#: this long): the hook's answer must reach the JVM, and the driver's output goes through it.
OUTLIVE_JVM_S = 30.0


class GracefulStopHook:
    """A ``java.lang.Runnable`` implemented in Python (a py4j callback): run by the JVM's
    shutdown, it calls ``request_stop`` and waits until :meth:`release` (the app stopped)
    or ``wait_s`` passes."""

    def __init__(self, request_stop: Callable[[], None], wait_s: float) -> None:
        self._request_stop = request_stop
        self.wait_s = wait_s
        self._released = threading.Event()
        self.ran = False  # whether the JVM's shutdown called the hook

    def run(self) -> None:
        """Called by the JVM's shutdown-hook thread, before Spark's hooks."""
        self.ran = True
        try:
            log.warning(
                "driver JVM shutting down (SIGTERM to spark-submit?): finishing the current "
                "batch, then stopping; Spark's shutdown waits up to %gs",
                self.wait_s,
            )
            started = time.monotonic()
            self._request_stop()
            if self._released.wait(self.wait_s):
                log.info(
                    "app stopped %.1fs after the JVM's shutdown began; Spark shuts down now",
                    time.monotonic() - started,
                )
            else:
                log.error(
                    "app not stopped within %gs of the JVM's shutdown: Spark stops now, "
                    "under the running batch (it is not committed and runs again on restart)",
                    self.wait_s,
                )
        except Exception:  # an exception would only reach Hadoop's log as a py4j error
            log.exception("graceful stop hook failed; Spark shuts down now")

    def release(self) -> None:
        """The app has stopped (or failed): a JVM shutdown waiting in :meth:`run` goes on."""
        self._released.set()

    class Java:
        implements = ["java.lang.Runnable"]


class InstalledStopHook:
    """A :class:`GracefulStopHook` registered in the JVM; :meth:`close` when the app ends.

    ``java_hook`` is what Hadoop's manager holds: a Java ``Thread`` (never started) whose
    ``run()`` calls the Python hook. Hadoop compares hooks by reference, and py4j makes a
    new Java proxy each time a Python object is passed, so the proxy itself could never be
    found again to be removed; the one Java object held here can.
    """

    def __init__(self, hook: GracefulStopHook, java_hook: Any, manager: Any) -> None:
        self.hook = hook
        self.java_hook = java_hook
        self._manager = manager
        self._parent_pid = os.getppid()  # the JVM, under spark-submit

    def close(self) -> None:
        """Release a shutdown waiting for the app and unregister the hook, so a JVM that
        exits later does not call back into a Python driver that may be gone. Once the
        JVM's shutdown has begun, this process waits for the JVM at exit instead (see
        :meth:`_outlive_jvm`)."""
        self.hook.release()
        shutting_down = True
        if not self.hook.ran:
            try:
                shutting_down = bool(self._manager.isShutdownInProgress())
                if not shutting_down:
                    self._manager.removeShutdownHook(self.java_hook)
            except Exception as exc:  # the JVM is gone (kill -9): nothing to undo
                log.debug("graceful stop hook not removed: %s", exc)
        if shutting_down:
            atexit.register(self._outlive_jvm)

    def _outlive_jvm(self) -> None:
        """At exit, after the hook ran: the hook's answer travels on a py4j daemon thread of
        this process, which exiting at once would cut (the JVM then logs the hook as failed
        and this process's last log lines are lost). Flush, then wait until the JVM (the
        parent) has finished its shutdown, at most :data:`OUTLIVE_JVM_S`."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):  # the JVM's end may be gone
                stream.flush()
        deadline = time.monotonic() + OUTLIVE_JVM_S
        while os.getppid() == self._parent_pid and time.monotonic() < deadline:
            time.sleep(0.05)


def jvm_is_parent(jvm: Any) -> bool:
    """Whether the driver JVM is this process's parent (spark-submit started the Python
    driver), so a SIGTERM to spark-submit reaches the JVM and not this process."""
    return int(jvm.java.lang.ProcessHandle.current().pid()) == os.getppid()


def install_graceful_stop_hook(
    spark: Any, request_stop: Callable[[], None], wait_s: float
) -> InstalledStopHook | None:
    """When the driver JVM is this process's parent and ``wait_s`` > 0, register a JVM
    shutdown hook that stops the app gracefully before Spark's hooks run; else ``None``
    (nothing changes). ``request_stop`` must return at once; the hook then waits until
    :meth:`InstalledStopHook.close` or ``wait_s``."""
    if wait_s <= 0 or not jvm_is_parent(spark.sparkContext._jvm):
        return None
    installed = register_stop_hook(spark, request_stop, wait_s)
    log.info(
        "launched by the driver JVM: a JVM shutdown (SIGTERM to spark-submit) stops the app "
        "gracefully first (waits up to %gs)",
        wait_s,
    )
    return installed


def register_stop_hook(
    spark: Any, request_stop: Callable[[], None], wait_s: float
) -> InstalledStopHook:
    """Register a :class:`GracefulStopHook` in Hadoop's shutdown-hook manager at
    :data:`HOOK_PRIORITY`, with a JVM-side timeout of ``wait_s`` plus a margin (no check of
    who is whose parent: :func:`install_graceful_stop_hook` decides that)."""
    from pyspark.java_gateway import ensure_callback_server_started

    context = spark.sparkContext
    jvm = context._jvm
    ensure_callback_server_started(context._gateway)  # the JVM calls the hook through it
    hook = GracefulStopHook(request_stop, wait_s)
    java_hook = jvm.java.lang.Thread(hook, "statekeeper-graceful-stop")
    manager = jvm.org.apache.hadoop.util.ShutdownHookManager.get()
    timeout_ms = int((wait_s + JVM_TIMEOUT_MARGIN_S) * 1000)
    milliseconds = jvm.java.util.concurrent.TimeUnit.MILLISECONDS
    manager.addShutdownHook(java_hook, HOOK_PRIORITY, timeout_ms, milliseconds)
    return InstalledStopHook(hook, java_hook, manager)
