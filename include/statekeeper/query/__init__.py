"""Interactive queries: each executor's query server reads the task stores it holds (the
last commit of its active tasks, its standbys' copies with their lag) through read-only
RocksDB views, and names where any key lives (Kafka Streams IQ, KIP-535)."""
