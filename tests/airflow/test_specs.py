"""Which apps the DAGs drive: the spec files one level below the specs folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.airflow.specs import discover, discover_apps, snapshot_asset
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


def test_a_bad_spec_is_kept_apart_with_its_one_line_reason(tmp_path):
    good = _spec(tmp_path / "good", "good", "app-good")
    typo = tmp_path / "typo" / "typo.yaml"
    typo.parent.mkdir()
    typo.write_text(
        "application_id: app-typo\ntopology: x.py:build\nsupervision:\n  stall_timeout: 300\n"
    )
    broken = tmp_path / "broken" / "broken.yaml"
    broken.parent.mkdir()
    broken.write_text("application_id: [\n")
    _spec(tmp_path / "twin", "twin", "app-good")  # a second spec of an app id

    apps, invalid = discover(tmp_path)
    assert [(a.application_id, a.spec_path) for a in apps] == [("app-good", str(good))]
    reasons = {Path(bad.spec_path).parent.name: bad for bad in invalid}
    assert set(reasons) == {"typo", "broken", "twin"}
    assert reasons["typo"].name == "app-typo"  # its own app id: its tasks keep their names
    assert reasons["typo"].reason == (
        "invalid app spec: supervision.stall_timeout: unknown field (did you mean "
        f"stall_timeout_s?) at {typo}:4"
    )
    assert reasons["broken"].name == "invalid_broken_broken_yaml"
    assert "not valid yaml" in reasons["broken"].reason and "\n" not in reasons["broken"].reason
    assert reasons["twin"].name == "invalid_twin_twin_yaml"  # app-good is taken
    assert "'app-good' is in two specs" in reasons["twin"].reason
    with pytest.raises(ConfigError, match="app-typo|not valid yaml|two specs"):
        discover_apps(tmp_path)  # the strict form still refuses
