"""Standby replicas: warm copies of other executors' task stores, kept at the changelog's last
commit marker (Kafka Streams' num.standby.replicas), with KIP-988 update listeners."""
