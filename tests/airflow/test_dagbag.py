"""Every DAG in dags/ imports with no errors, fast, without pyspark or great_expectations.

Checked in a fresh interpreter so modules other tests imported do not hide a heavy import,
against the repo's shipped app specs (spark_apps/).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .conftest import AIRFLOW_ENV, DAGS

DAG_IDS = {
    "statekeeper_apps",
    "statekeeper_app_actions",
    "statekeeper_snapshots",
    "statekeeper_restore_drill",
    "statekeeper_changelog_audit",
}

_PROBE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({
    "errors": {str(k): str(v) for k, v in bag.import_errors.items()},
    "dags": {d: sorted(t.task_id for t in bag.dags[d].tasks) for d in bag.dags},
    "seconds": {s.file: s.duration.total_seconds() for s in bag.dagbag_stats},
    "heavy": sorted(m for m in ("pyspark", "great_expectations") if m in sys.modules),
}))
"""


def test_every_dag_imports_fast_without_heavy_modules(airflow_db):
    env = {**os.environ, **AIRFLOW_ENV}
    env.pop("STATEKEEPER_SPECS_DIR", None)  # the repo's spark_apps/
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(DAGS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    print("DagBag parse seconds:", found["seconds"])
    assert found["errors"] == {}
    assert set(found["dags"]) == DAG_IDS
    # One task per shipped app spec (spark_apps/word_count, spark_apps/patient_monitoring).
    assert found["dags"]["statekeeper_snapshots"] == [
        "snapshot_patient-monitoring",
        "snapshot_word-count",
    ]
    assert found["dags"]["statekeeper_apps"] == [
        "supervise_patient-monitoring",
        "supervise_word-count",
    ]
    assert found["dags"]["statekeeper_app_actions"] == [
        "act_patient-monitoring",
        "act_word-count",
    ]
    assert len(found["seconds"]) == len(DAG_IDS) - 1  # both supervision DAGs: one file
    assert all(seconds < 1.0 for seconds in found["seconds"].values()), found["seconds"]
    assert found["heavy"] == []
