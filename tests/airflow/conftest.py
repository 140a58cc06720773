"""Airflow fixtures: a throwaway AIRFLOW_HOME with a migrated SQLite metadata database and the
repo's dags/ as the DAG folder.

Airflow reads its configuration once, when ``airflow`` is first imported, so the environment
is set here, at collection, before any test module imports it (no other suite imports
Airflow). The broker/admin fixtures come from tests/conftest.py.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="statekeeper-airflow-"))
AIRFLOW_ENV = {
    "AIRFLOW_HOME": str(AIRFLOW_HOME),
    "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{AIRFLOW_HOME / 'airflow.db'}",
}
os.environ.update(AIRFLOW_ENV)


@pytest.fixture(scope="session")
def airflow_db() -> Iterator[Path]:
    """``airflow db migrate`` into the temporary AIRFLOW_HOME."""
    airflow = Path(sys.executable).with_name("airflow")
    subprocess.run(
        [str(airflow), "db", "migrate"],
        check=True,
        capture_output=True,
        env={**os.environ, **AIRFLOW_ENV},
        timeout=120,
    )
    yield AIRFLOW_HOME


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the temporary AIRFLOW_HOME (made at collection, used or not). Airflow's logging
    config leaves py4j at INFO on a handler whose stream pytest closes: py4j's goodbye line
    from a garbage-collected Spark gateway at exit would print a "Logging error"."""
    logging.getLogger("py4j").setLevel(logging.WARNING)
    shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)
