"""App control on the driver: the app class (:mod:`statekeeper_app`), batch planning,
lifecycle states, the status endpoint and bounded batch figures, app specs, the launcher.

Where is a micro-batch planned? In :mod:`batch_planner`: ``BatchPlanner`` (pure, no Spark)
turns Spark's offset log and what each task last committed into each task's run — its
ranges, the earlier batches it must replay, and whether it commits now. ``StatekeeperApp``
feeds it and runs the runs on the executors (:mod:`statekeeper.worker.task_runner`).
"""
