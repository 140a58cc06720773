"""Harness for testing and demoing statekeeper apps (as ``pyspark.testing`` is for Spark's).

- :mod:`statekeeper.testing.app_process` — an app run from its spec as a child process in its
  own process group: start it, watch its status file, SIGTERM or ``kill -9`` it;
- :mod:`statekeeper.testing.cluster_watch` — what a test or demo on a Spark standalone
  cluster waits for and asks through an app's status document (placements, standbys caught
  up, a real drain, query endpoints), the Python workers of a worker (for host freezes) and a
  bounded point-query loop.

The test suite, the benchmarks and the shipped apps' demos use it; nothing else in the
library imports it.
"""
