"""Kafka plumbing: where the broker quirks live, client configs, topic admin, reading.

- :mod:`~statekeeper.kafka.adapter`: how brokers differ (Apache Kafka vs the embedded Tansu)
  and where each difference is handled, the :class:`~statekeeper.kafka.adapter.BrokerProfile`
  code asks where behaviour differs, and the base client configs.
- :mod:`~statekeeper.kafka.partition_reader`: the one loop that reads partitions to their
  end (partition EOF or an end offset); restores, log-end offsets, range reads and
  :mod:`~statekeeper.kafka.topic_reader` all read with it.
- :mod:`~statekeeper.kafka.offsets` (log start/end offsets),
  :mod:`~statekeeper.kafka.range_reader` (exact offset ranges for micro-batches),
  :mod:`~statekeeper.kafka.admin` (topics), :mod:`~statekeeper.kafka.embedded` (the
  embedded broker for tests and the demo).
"""
