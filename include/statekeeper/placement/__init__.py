"""Where each stream task runs: the one home of placement.

- :mod:`~statekeeper.placement.assignment`: the decision as plain data (active executor,
  standbys and epoch per task; executors' query endpoints), sent to every executor;
- :mod:`~statekeeper.placement.registry`: the sticky decisions (where a task last ran, else
  a standby, else the least loaded executor; epochs; balancing; standby placement);
- :mod:`~statekeeper.placement.driver`: one app run's placement of each batch, the results
  that still count, and which unrun runs move away in the next pass;
- :mod:`~statekeeper.placement.shares`: how a batch's runs split into Spark tasks, and which
  share a Spark task takes on its executor;
- :mod:`~statekeeper.placement.published`: the assignment as an executor host holds it, and
  a parked task's "still placed here?" check.
"""
