"""Every DAG in dags/ imports with no errors, fast, without pyspark or great_expectations.

Checked in a fresh interpreter so modules other tests imported do not hide a heavy import,
against the repo's shipped app specs (spark_apps/).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .conftest import AIRFLOW_ENV, DAGS

DAG_IDS = {
    "statekeeper_apps",
    "statekeeper_app_actions",
    "statekeeper_snapshots",
    "statekeeper_restore_drill",
    "statekeeper_changelog_audit",
    "statekeeper_upgrade",
}
#: DAGs with a task per app (the upgrade DAG names its apps in its params).
PER_APP = DAG_IDS - {"statekeeper_upgrade"}

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
    # One task per shipped app spec (spark_apps/word_count, spark_apps/patient_monitoring and
    # their version 2, kept stopped by its spec until its state is migrated; word_count_sqlite,
    # an example kept stopped by its spec).
    apps = [
        "patient-monitoring",
        "patient-monitoring-v2",
        "word-count",
        "word-count-sqlite",
        "word-count-v2",
    ]
    assert found["dags"]["statekeeper_snapshots"] == [f"snapshot_{app}" for app in apps]
    assert found["dags"]["statekeeper_apps"] == [f"supervise_{app}" for app in apps]
    assert found["dags"]["statekeeper_app_actions"] == [f"act_{app}" for app in apps]
    shadow = ["aligned", "cutover", "diff", "drill", "handover", "launch", "migrate", "stop"]
    assert found["dags"]["statekeeper_upgrade"] == sorted(
        ["launch", "upgrade", *(f"shadow_{step}" for step in shadow)]
    )
    assert len(found["seconds"]) == len(DAG_IDS) - 1  # both supervision DAGs: one file
    assert all(seconds < 1.0 for seconds in found["seconds"].values()), found["seconds"]
    assert found["heavy"] == []


_BAD_SPEC_PROBE = """
import json, sys
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder=sys.argv[1])
print(json.dumps({
    "errors": {str(k): str(v) for k, v in bag.import_errors.items()},
    "dags": {d: sorted(t.task_id for t in bag.dags[d].tasks) for d in bag.dags},
    "placeholders": {
        f"{d}.{t.task_id}": [t.spec_path, t.reason]
        for d in bag.dags for t in bag.dags[d].tasks if type(t).__name__ == "InvalidSpecOperator"
    },
}))
"""


def test_a_bad_spec_fails_only_its_own_tasks(airflow_db, tmp_path):
    """One invalid spec in the specs folder: every DAG still parses, the other apps' tasks
    exist, and the bad app gets a placeholder task per DAG that names the spec and the
    one-line reason (it fails when run)."""
    specs = tmp_path / "specs"
    for name in ("alpha", "beta"):
        (specs / name).mkdir(parents=True)
        (specs / name / f"{name}.yaml").write_text(
            f"application_id: {name}\ntopology: topology.py:build\n"
        )
    bad = specs / "gamma" / "gamma.yaml"
    bad.parent.mkdir()
    bad.write_text(
        "application_id: gamma\ntopology: topology.py:build\nsupervision:\n  stall_timeout: 300\n"
    )
    env = {**os.environ, **AIRFLOW_ENV, "STATEKEEPER_SPECS_DIR": str(specs)}
    done = subprocess.run(
        [sys.executable, "-c", _BAD_SPEC_PROBE, str(DAGS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["errors"] == {}
    assert set(found["dags"]) == DAG_IDS
    for dag_id, verb in (
        ("statekeeper_apps", "supervise"),
        ("statekeeper_app_actions", "act"),
        ("statekeeper_snapshots", "snapshot"),
        ("statekeeper_restore_drill", "drill"),
        ("statekeeper_changelog_audit", "audit"),
    ):
        assert found["dags"][dag_id] == [f"{verb}_alpha", f"{verb}_beta", f"{verb}_gamma"]
        path, reason = found["placeholders"][f"{dag_id}.{verb}_gamma"]
        assert path == str(bad)
        assert reason == (
            "invalid app spec: supervision.stall_timeout: unknown field (did you mean "
            f"stall_timeout_s?) at {bad}:4"
        )
    assert len(found["placeholders"]) == len(PER_APP)


def test_the_placeholder_task_fails_naming_the_spec():
    from airflow.sdk.exceptions import AirflowException

    from statekeeper.airflow.operators.invalid_spec import InvalidSpecOperator

    task = InvalidSpecOperator(task_id="snapshot_gamma", spec_path="g.yaml", reason="bad field")
    with pytest.raises(AirflowException, match=r"app spec g.yaml is invalid: bad field"):
        task.execute({})
