"""Running on a Spark cluster: a local standalone cluster, executor identity, task placement."""
