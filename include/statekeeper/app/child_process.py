"""An app started as a child process dies with the process that started it.

A test or the demo starts an app in its own process group (so a kill -9 of the group takes
down the driver, the Spark JVM and every Python worker at once). If that parent is killed
itself, nobody kills the group, and the app would run on, orphaned. The parent names
itself in the child's environment (:func:`child_env`); the child's launcher then asks Linux
to SIGKILL it when the parent dies (``PR_SET_PDEATHSIG``, :func:`die_with_parent`). The
Spark JVM follows its driver (it exits when its stdin from the driver closes) and takes its
Python workers with it.

Linux delivers the signal when the *thread* that started the child ends, so start child
apps from a thread that lives as long as they should (a test's main thread does).
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys

log = logging.getLogger("statekeeper.app")

#: Environment variable a parent sets to its pid when the child app must die with it.
DIE_WITH_PARENT_ENV = "STATEKEEPER_DIE_WITH_PARENT"

_PR_SET_PDEATHSIG = 1  # from <sys/prctl.h>


def child_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a child app that must die with this process."""
    return {**(os.environ if base is None else base), DIE_WITH_PARENT_ENV: str(os.getpid())}


def die_with_parent() -> bool:
    """In a child app: if the environment names this process's parent, be SIGKILLed when
    it dies. Returns whether that was arranged; a no-op without the variable or off Linux.

    The variable is removed, so processes this one starts do not take it for themselves.
    """
    parent = os.environ.pop(DIE_WITH_PARENT_ENV, None)
    if not parent or not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        log.warning("cannot tie this app to its parent: %s", os.strerror(ctypes.get_errno()))
        return False
    if os.getppid() != int(parent):  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)
    return True
