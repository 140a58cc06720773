"""Which apps the DAGs drive: the spec files one level below the specs folder."""

from __future__ import annotations

import pytest

from statekeeper.airflow.specs import discover_apps, snapshot_asset
from statekeeper.errors import ConfigError

TOPOLOGY = "def build(**params):\n    raise AssertionError('specs are not built at parse time')\n"


def _spec(folder, name: str, app_id: str, suffix: str = ".yaml"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "topo.py").write_text(TOPOLOGY)
    path = folder / f"{name}{suffix}"
    if suffix == ".toml":
        path.write_text(f'application_id = "{app_id}"\ntopology = "topo.py:build"\n')
    else:
        path.write_text(f"application_id: {app_id}\ntopology: topo.py:build\n")
    return path


def test_finds_yaml_and_toml_specs_one_level_down(tmp_path):
    a = _spec(tmp_path / "a", "a", "app-a")
    b = _spec(tmp_path / "b", "b", "app-b", ".toml")
    _spec(tmp_path / "c" / "deeper", "c", "app-c")  # two levels down: not an app of the folder
    (tmp_path / "a" / "notes.txt").write_text("not a spec")
    apps = discover_apps(tmp_path)
    assert [(x.application_id, x.spec_path) for x in apps] == [
        ("app-a", str(a)),
        ("app-b", str(b)),
    ]
    assert apps[0].snapshot_asset.uri == "statekeeper://app-a/snapshots"
    assert snapshot_asset("app-b").name == "statekeeper_app-b_snapshots"


def test_two_specs_of_one_app_and_a_missing_folder_are_named(tmp_path, monkeypatch):
    first = _spec(tmp_path / "a", "a", "same")
    second = _spec(tmp_path / "b", "b", "same")
    with pytest.raises(ConfigError, match="'same' is in two specs") as err:
        discover_apps(tmp_path)
    assert str(first) in str(err.value) and str(second) in str(err.value)

    monkeypatch.setenv("STATEKEEPER_SPECS_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(ConfigError, match="nowhere does not exist.*STATEKEEPER_SPECS_DIR"):
        discover_apps()
