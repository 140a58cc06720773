"""statekeeper: Kafka-Streams-grade state stores for Python, run on PySpark, operated by Airflow."""

__version__ = "0.1.0"
