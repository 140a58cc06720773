"""The demo's DAG act points the DAGs at a spec folder holding the demo app's spec alone, with
the settings the demo ran the app with: that spec must load as the same app."""

from __future__ import annotations

from pathlib import Path

from spark_apps.patient_monitoring.demo_dags import DAGS, DEMO_DAGS, write_demo_spec
from statekeeper.app.spec import load_app_spec
from statekeeper.testing.app_process import spark_app_spec


def test_demo_spec_is_the_app_with_the_demo_settings(tmp_path):
    original = spark_app_spec("patient_monitoring")
    overrides = {
        "bootstrap_servers": "127.0.0.1:12345",
        "state_dir": str(tmp_path / 'odd "dir"' / "state"),
        "max_records_per_batch": 10_000,
    }
    written = write_demo_spec(original, overrides, tmp_path / "specs")
    assert written.parent.parent == tmp_path / "specs"  # <specs>/<app>/<spec>: one level down
    spec, source = load_app_spec(written), load_app_spec(original)
    assert (spec.application_id, spec.params) == (source.application_id, source.params)
    assert Path(spec.topology.rpartition(":")[0]).is_absolute()
    assert (spec.generator, spec.drill_model) == (source.generator, source.drill_model)
    settings = spec.resolved_settings()
    assert settings.bootstrap_servers == "127.0.0.1:12345"
    assert settings.state_dir == tmp_path / 'odd "dir"' / "state"
    assert settings.max_records_per_batch == 10_000
    assert settings.trigger_interval_ms == source.resolved_settings().trigger_interval_ms
    assert spec.build_topology().describe() == source.build_topology().describe()


def test_the_demo_runs_dags_that_exist():
    for dag_file, dag_id in DEMO_DAGS:
        assert (DAGS / dag_file).is_file()
        assert f'dag_id="{dag_id}"' in (DAGS / dag_file).read_text()
