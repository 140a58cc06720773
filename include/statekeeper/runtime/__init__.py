"""The streaming runtime: processor API and DSL, stream tasks, Kafka source and sink for Spark.

Importing this package stays light (no pyspark); modules that need Spark import it themselves.
"""
