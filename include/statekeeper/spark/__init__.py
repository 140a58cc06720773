"""Spark connectors: the Kafka data sources (offset ranges, rows) and sink, reading Spark's
checkpoint (offset and commit logs), and the Spark session environment.

pyspark is imported by the modules that need it, never by this package.
"""
