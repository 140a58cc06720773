"""Which Spark master an app's session runs on: spark-submit's, or the settings'.

After ``SparkContext._ensure_initialized()`` the JVM's ``SparkConf`` always holds
``spark.master``: a JVM that pyspark launches itself is a ``spark-submit pyspark-shell``, and
spark-submit fills in ``local[*]`` when given no master. So "the conf has a master" cannot
tell a master someone chose from pyspark's default; who started whom can:

* **Launched by a JVM** (``spark-submit app.py``, the ``pyspark`` shell): the JVM runs first
  and hands this process its gateway in ``PYSPARK_GATEWAY_PORT`` (the variable pyspark itself
  checks to decide whether to start a JVM). That launch's master wins: spark-submit's
  ``--master`` (or its own default), so a supervisor's spark-submit connection decides where
  the app runs. ``settings.spark_master`` is ignored (with a warning when it was set and
  differs).
* **Python starts the JVM** (``statekeeper app run``, ``python -m statekeeper.app.launcher``,
  tests): ``settings.spark_master`` applies (default ``local[2]``), unless the launch
  arguments pyspark passes to spark-submit (``PYSPARK_SUBMIT_ARGS``) name ``--master``.
* **A SparkContext already runs in this process**: its master stands; a session is reused.

An app's own ``spark_conf`` entry ``spark.master`` overrides all of these (it is applied as
any other conf the app sets).
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping

#: Set by a JVM that launched this Python process (spark-submit's PythonRunner, the shell).
GATEWAY_PORT_ENV = "PYSPARK_GATEWAY_PORT"
#: What pyspark passes to spark-submit when it starts the JVM itself.
SUBMIT_ARGS_ENV = "PYSPARK_SUBMIT_ARGS"


def launched_by_jvm(environ: Mapping[str, str] | None = None) -> bool:
    """Whether a running JVM (spark-submit) started this process and owns the launch."""
    return GATEWAY_PORT_ENV in (os.environ if environ is None else environ)


def submit_args_master(submit_args: str | None) -> str | None:
    """The ``--master`` named in spark-submit style arguments, if any."""
    words = shlex.split(submit_args or "")
    for at, word in enumerate(words):
        if word == "--master" and at + 1 < len(words):
            return words[at + 1]
        if word.startswith("--master="):
            return word.split("=", 1)[1]
    return None


def master_to_set(
    settings_master: str,
    *,
    environ: Mapping[str, str] | None = None,
    context_active: bool = False,
) -> str | None:
    """The master the app's session builder must set, or None to keep the one the launch
    gave (see the module docstring for the rule). Call it before the JVM starts, or at least
    before anything sets ``PYSPARK_GATEWAY_PORT`` in this process."""
    environ = os.environ if environ is None else environ
    if context_active or launched_by_jvm(environ):
        return None
    if submit_args_master(environ.get(SUBMIT_ARGS_ENV)) is not None:
        return None
    return settings_master


def is_local_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local[*]``, ``local[N,F]``: executors live in the driver JVM."""
    return master == "local" or master.startswith("local[")


def executor_python_conf(master: str, python: str) -> dict[str, str]:
    """Confs that make a cluster's executors run Python workers with ``python`` (the
    driver's interpreter, which has statekeeper installed) rather than the worker host's
    ``python3``; nothing for a local master, whose executors are the driver's JVM."""
    if is_local_master(master):
        return {}
    return {"spark.pyspark.python": python, "spark.executorEnv.PYSPARK_PYTHON": python}
