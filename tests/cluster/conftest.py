"""A real Spark standalone cluster on 127.0.0.1 for the cluster tests: 2 workers x 1 core.

Module-scoped: a module that uses ``spark_cluster`` gets its own cluster (the master and
each worker are a JVM of ~0.22 GB resident; an app adds an executor JVM of ~0.26 GB and a
pyspark daemon per worker), always stopped after the module. Mark such modules
``pytest.mark.xdist_group("spark_cluster")``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from statekeeper.cluster.local_cluster import ClusterConfig, LocalSparkCluster


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSparkCluster]:
    """A started cluster: ``master_url``, ``workers`` (each with its own ``state_dir``, which
    its executors see as STATEKEEPER_EXECUTOR_STATE_DIR), ``kill_worker``, ``restart_worker``."""
    config = ClusterConfig(
        base_dir=tmp_path_factory.mktemp("spark-cluster"),
        workers=2,
        cores_per_worker=1,
        memory_per_worker="1g",
    )
    cluster = LocalSparkCluster(config)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
