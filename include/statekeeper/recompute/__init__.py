"""Helpers for reference recomputations: independent models an app's results are checked with.

An app's reference model (``spark_apps/<app>/reference.py``: plain per-record Python written
from the app's contract, sharing no code with the runtime) and its Spark batch recomputation
(``reference_spark.py``) use these: :func:`by_task` splits input records into tasks, a
topic reader reads a whole input topic, and :mod:`statekeeper.recompute.spark_frames`
(imported on demand) builds the DataFrame a Spark recomputation reads. Tests, the demo and
restore drills compare an app's stores and outputs with such models.
"""

from statekeeper.kafka.topic_reader import read_topic
from statekeeper.recompute.grouping import RecordsInput, by_task

__all__ = ["RecordsInput", "by_task", "read_topic"]
