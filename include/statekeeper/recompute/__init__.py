"""Independent reference recomputation of the example apps' results.

Plain per-record Python written from the apps' contract (no :mod:`statekeeper.runtime`), a
topic reader, and a Spark batch recomputation (:mod:`statekeeper.recompute.spark_recompute`,
imported on demand) that must agree with the Python models. Tests, the demo and restore
drills compare the apps' stores and outputs with these.
"""

from statekeeper.recompute.patient_monitoring import PatientResult, latest_heart_rate
from statekeeper.recompute.patient_monitoring import recompute as recompute_patients
from statekeeper.recompute.reader import read_topic
from statekeeper.recompute.word_count import WordCountResult
from statekeeper.recompute.word_count import recompute as recompute_word_count

__all__ = [
    "PatientResult",
    "WordCountResult",
    "latest_heart_rate",
    "read_topic",
    "recompute_patients",
    "recompute_word_count",
]
