"""Spark connectors: the Kafka data sources (offset ranges, rows) and sink, reading Spark's
checkpoint (offset and commit logs), and the Spark session environment.

pyspark is imported by the modules that need it, never by this package.
"""

from statekeeper.errors import require_extra

require_extra("spark", "pyspark", "statekeeper.spark (running apps on Spark)")
