"""What runs inside a Spark task on an executor: a share of a micro-batch's stream tasks
(:mod:`task_runner`; what the driver sends each task and gets back is in
:mod:`task_run`), tasks kept open between batches (:mod:`parked_tasks`), per-batch
claims of parked tasks (:mod:`batch_claims`) and the worker's garbage-collector control.
"""
