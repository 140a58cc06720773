"""Kafka plumbing: broker profiles and client configs, topic admin, and the embedded broker.

Broker-specific behaviour lives only in :mod:`statekeeper.kafka.adapter`; everything else in
statekeeper asks the :class:`~statekeeper.kafka.adapter.BrokerProfile` instead of checking
which broker it talks to.
"""
