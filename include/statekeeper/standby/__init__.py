"""Standby replicas: warm copies of other executors' task stores, kept at the changelog's last
commit marker (Kafka Streams' num.standby.replicas), with KIP-988 update listeners.

- :mod:`statekeeper.standby.standby_task`: one task's standby copy and its update step.
- :mod:`statekeeper.standby.executor_standbys`: every standby task of this executor, kept
  warm by one updater thread (the executor-services component: reconcile, report, close).
- :mod:`statekeeper.standby.tail`: reads a copy's changelogs on between steps.
- :mod:`statekeeper.standby.listener`: the KIP-988 update listeners and their recorder.
"""
