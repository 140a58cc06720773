"""A spec's ``topology: file.py:function``: found beside the spec, shipped to executors by value."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from pyspark import cloudpickle

from statekeeper.app.spec import AppSpec, load_app_spec
from statekeeper.errors import ConfigError
from statekeeper.testing.app_process import spark_app_spec

TOPOLOGY_FILE = """
FACTOR = 3


def scale(value):
    return value * FACTOR


def build(offset=0):
    return {"scale": scale, "shift": lambda value: value + offset}
"""


def _spec(folder: Path, topology: str = "topo/my_topology.py:build") -> Path:
    (folder / "topo").mkdir(parents=True, exist_ok=True)
    (folder / "topo" / "my_topology.py").write_text(TOPOLOGY_FILE)
    path = folder / "app.yaml"
    path.write_text(f"application_id: filed\ntopology: {topology}\nparams: {{offset: 10}}\n")
    return path


def test_topology_file_is_found_relative_to_the_spec(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path.parent)  # not the spec's folder
    spec = load_app_spec(_spec(tmp_path / "app"))
    assert spec.topology == f"{tmp_path / 'app' / 'topo' / 'my_topology.py'}:build"
    built = spec.build_topology()
    assert built["scale"](2) == 6 and built["shift"](1) == 11
    # The same file is imported once, however often the spec builds its topology.
    assert spec.build_topology()["scale"] is built["scale"]


def test_a_spec_dumped_elsewhere_still_finds_its_topology_file(tmp_path: Path) -> None:
    spec = load_app_spec(_spec(tmp_path / "app"))
    copy = tmp_path / "elsewhere" / "copy.yaml"
    copy.parent.mkdir()
    copy.write_text(yaml.safe_dump(spec.model_dump()))
    assert load_app_spec(copy).build_topology()["scale"](1) == 3


def test_missing_topology_file_is_a_config_error(tmp_path: Path) -> None:
    path = _spec(tmp_path, topology="nowhere.py:build")
    with pytest.raises(ConfigError, match="cannot import"):
        load_app_spec(path).build_topology()
    with pytest.raises(ConfigError, match="no function 'absent'"):
        load_app_spec(_spec(tmp_path, topology="topo/my_topology.py:absent")).build_topology()


def test_topology_functions_are_pickled_by_value(tmp_path: Path) -> None:
    """A Spark executor cannot import the file: it must get the functions themselves."""
    spec_path = _spec(tmp_path / "app")
    built = load_app_spec(spec_path).build_topology()
    payload = cloudpickle.dumps(built)
    (tmp_path / "app" / "topo" / "my_topology.py").unlink()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pickle, sys; f = pickle.loads(sys.stdin.buffer.read()); "
            "print(f['scale'](5), f['shift'](5))",
        ],
        input=payload,
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.split() == [b"15", b"15"]


def test_module_topologies_still_load() -> None:
    spec = AppSpec(application_id="mod", topology="json:loads", params={"s": "[1]"})
    assert spec.build_topology() == [1]


@pytest.mark.parametrize(
    "app", ["word_count", "patient_monitoring", "word_count_v2", "patient_monitoring_v2"]
)
def test_shipped_specs_build_their_topologies(app: str) -> None:
    spec = load_app_spec(spark_app_spec(app))
    assert spec.topology.startswith(str(spark_app_spec(app).parent / "topology.py"))
    assert spec.build_topology().subtopologies
