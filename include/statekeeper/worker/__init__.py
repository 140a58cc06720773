"""What runs inside a Spark task on an executor: a share of a micro-batch's stream tasks
(:mod:`task_runner`), tasks kept open between batches (:mod:`parked_tasks`), per-batch
claims of parked tasks (:mod:`batch_claims`) and the worker's garbage-collector control.
"""
