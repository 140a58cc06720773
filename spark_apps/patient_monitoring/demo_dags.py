"""The demo's last act: the snapshot, restore drill and changelog audit DAGs of ``dags/``, each
run once with ``dag.test()`` against the demo's (stopped) app, with their results printed.

Airflow runs in this process on a throwaway AIRFLOW_HOME (SQLite, ``airflow db migrate``),
so nothing is left behind. The DAGs find the app through ``STATEKEEPER_SPECS_DIR``: a folder
with the demo's app spec alone, its settings those the demo ran the app with (broker, state,
checkpoints). Airflow reads its configuration on first import, so :func:`run_dags` sets the
environment before importing it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
#: (DAG file, DAG id) in the order the demo runs them.
DEMO_DAGS = (
    ("statekeeper_snapshots.py", "statekeeper_snapshots"),
    ("statekeeper_restore_drill.py", "statekeeper_restore_drill"),
    ("statekeeper_changelog_audit.py", "statekeeper_changelog_audit"),
)


def write_demo_spec(spec_path: Path, overrides: dict[str, Any], folder: Path) -> Path:
    """``folder/<app>/<spec>.toml``: the app's spec with absolute paths of the files it names
    (topology, generator, drill model) and the demo's settings overrides merged into its
    settings."""
    spec = tomllib.loads(spec_path.read_text())
    for field in ("topology", "generator", "drill_model"):
        module, _, func = str(spec.get(field, "")).rpartition(":")
        if module.endswith(".py"):
            spec[field] = f"{(spec_path.parent / module).resolve()}:{func}"
    spec["settings"] = {**spec.get("settings", {}), **overrides}
    target = folder / spec_path.parent.name / spec_path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(_toml(spec))
    return target


def _toml(data: dict[str, Any]) -> str:
    """The few TOML shapes an app spec has: top-level scalars and one level of tables."""

    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = [f"{k} = {value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for table, body in data.items():
        if isinstance(body, dict):
            lines.append(f"\n[{table}]")
            lines += [f"{k} = {value(v)}" for k, v in body.items() if not isinstance(v, dict)]
            for sub, inner in body.items():
                if isinstance(inner, dict):
                    lines.append(f"\n[{table}.{sub}]")
                    lines += [f'"{k}" = {value(v)}' for k, v in inner.items()]
    return "\n".join(lines) + "\n"


def _airflow_env(home: Path) -> dict[str, str]:
    return {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        # dag.test() logs every task step at INFO; the demo prints each task's result itself.
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
    }


def _summary(dag_id: str, ti: Any) -> str:
    """One line of what a task returned (its XCom)."""
    result = ti.xcom_pull(task_ids=ti.task_id) or {}
    if dag_id == "statekeeper_snapshots":
        return (
            f"{len(result.get('snapshot_ids') or [])} snapshot(s), {result.get('verified', 0)} "
            f"verified, in {result.get('url', '?')}"
        )
    if dag_id == "statekeeper_restore_drill":
        verdict = "passed" if result.get("passed") else "FAILED"
        return (
            f"drill {result.get('drill_id', '?')} {verdict}: RTO {result.get('rto_s', 0):.2f} s, "
            f"report {result.get('report_html', '?')}"
        )
    topics = result.get("topics") or result.get("changelogs") or []
    return f"verdict {result.get('verdict', '?')} over {len(topics)} changelog(s)"


def run_dags(spec_path: Path, overrides: dict[str, Any], say: Any = print) -> list[str]:
    """Run the snapshot, drill and audit DAGs once on the app; returns the problems (a DAG
    run that did not succeed)."""
    started = time.perf_counter()
    home = Path(tempfile.mkdtemp(prefix="statekeeper-demo-airflow-"))
    saved = dict(os.environ)
    try:
        specs = write_demo_spec(spec_path, overrides, home / "specs")
        os.environ.update(_airflow_env(home))
        os.environ["STATEKEEPER_SPECS_DIR"] = str(home / "specs")
        for key in overrides:  # the spec's settings must win over a stray environment
            os.environ.pop(f"STATEKEEPER_{key.upper()}", None)
        migrate = subprocess.run(
            [str(Path(sys.executable).with_name("airflow")), "db", "migrate"],
            capture_output=True,
            text=True,
            env=dict(os.environ),
            timeout=180,
            check=False,
        )
        if migrate.returncode != 0:
            return [f"airflow db migrate failed: {migrate.stdout[-1500:]}{migrate.stderr[-1500:]}"]
        say(f"Airflow on a temporary home ({home}, SQLite), app spec {specs}")

        from airflow.dag_processing.dagbag import DagBag

        problems = []
        for dag_file, dag_id in DEMO_DAGS:
            bag = DagBag(dag_folder=DAGS / dag_file)
            if bag.import_errors or dag_id not in bag.dags:
                problems.append(f"{dag_file}: {bag.import_errors or 'no DAG ' + dag_id}")
                continue
            t0 = time.perf_counter()
            run = bag.dags[dag_id].test()
            seconds = time.perf_counter() - t0
            state = str(run.state)
            say(f"dag.test({dag_id}): {state} in {seconds:.1f} s")
            for ti in run.get_task_instances():
                say(f"  {ti.task_id}: {ti.state} — {_summary(dag_id, ti)}")
            if state != "success":
                problems.append(f"DAG {dag_id} ended {state}")
        say(f"the three DAGs took {time.perf_counter() - started:.1f} s (db migrate included)")
        return problems
    finally:
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(home, ignore_errors=True)
