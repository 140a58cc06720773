"""A spec's ``generator:`` and ``drill_model:``: "file.py:function" beside the spec, checked
at load, imported by path as a module of the app's folder (relative imports of its
siblings work) without touching sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from statekeeper.app.app_files import import_app_file
from statekeeper.app.spec import AppSpec, load_app_spec, spec_json_schema
from statekeeper.errors import ConfigError
from statekeeper.testing.app_process import spark_app_spec

GENERATOR = """
from .helper import greeting


def main(argv):
    return greeting(argv)
"""


def _app(folder: Path, extra: str = "", package: bool = False) -> Path:
    """An app folder: a spec, a generator that imports a sibling, a drill model."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "topology.py").write_text("def build():\n    return {}\n")
    (folder / "helper.py").write_text("def greeting(argv):\n    return len(argv)\n")
    (folder / "gen.py").write_text(GENERATOR)
    (folder / "model.py").write_text("def spark_models(params):\n    return [params]\n")
    if package:
        (folder / "__init__.py").write_text("IMPORTED_AS_PACKAGE = True\n")
    spec = folder / "app.yaml"
    spec.write_text(f"application_id: filed\ntopology: topology.py:build\n{extra}")
    return spec


def _error(spec: Path) -> str:
    with pytest.raises(ConfigError) as caught:
        load_app_spec(spec)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("package", [False, True], ids=["plain-folder", "package-folder"])
def test_the_files_are_imported_by_path_with_their_siblings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, package: bool
) -> None:
    monkeypatch.chdir(tmp_path)  # not the app's folder
    spec_path = _app(
        tmp_path / "app" / "my-app",
        "generator: gen.py:main\ndrill_model: model.py:spark_models\nparams: {a: 1}\n",
        package,
    )
    path_before = list(sys.path)
    spec = load_app_spec(spec_path)
    folder = spec_path.parent.resolve()
    assert spec.generator == f"{folder / 'gen.py'}:main"
    assert spec.drill_model == f"{folder / 'model.py'}:spark_models"
    generator = spec.app_function("generator")
    assert generator(["--count", "3"]) == 2  # gen.py called its sibling helper.py
    assert spec.app_function("drill_model")(spec.params) == [{"a": 1}]
    assert sys.path == path_before
    package_name = generator.__module__.rpartition(".")[0]
    assert package_name.startswith("statekeeper_app_my_app_")
    assert sys.modules[package_name].__path__ == [str(folder)]
    assert getattr(sys.modules[package_name], "IMPORTED_AS_PACKAGE", False) is package
    # Imported once: the same function on every look-up.
    assert spec.app_function("generator") is generator
    assert import_app_file(folder / "gen.py").main is generator


def test_a_spec_dumped_elsewhere_still_finds_its_files(tmp_path: Path) -> None:
    spec = load_app_spec(_app(tmp_path / "app", "generator: gen.py:main\n"))
    copy = tmp_path / "elsewhere" / "copy.yaml"
    copy.parent.mkdir()
    copy.write_text(yaml.safe_dump(spec.model_dump()))
    assert load_app_spec(copy).app_function("generator")([]) == 0


@pytest.mark.parametrize("field", ["generator", "drill_model"])
def test_a_missing_file_fails_at_load_naming_the_field_and_the_file(
    tmp_path: Path, field: str
) -> None:
    message = _error(_app(tmp_path, f"{field}: nowhere/absent.py:main\n"))
    assert f"{field}: no file {tmp_path / 'nowhere' / 'absent.py'}" in message
    assert f"at {tmp_path / 'app.yaml'}:3" in message


@pytest.mark.parametrize("field", ["generator", "drill_model"])
def test_a_missing_function_fails_at_load_naming_the_field_and_the_file(
    tmp_path: Path, field: str
) -> None:
    message = _error(_app(tmp_path, f"{field}: gen.py:absent\n"))
    assert f"{field}: {tmp_path / 'gen.py'} defines no function 'absent'" in message
    assert f"at {tmp_path / 'app.yaml'}:3" in message


def test_a_file_that_does_not_parse_fails_at_load(tmp_path: Path) -> None:
    spec = _app(tmp_path, "drill_model: broken.py:spark_models\n")
    (tmp_path / "broken.py").write_text("def spark_models(:\n")
    message = _error(spec)
    assert f"drill_model: syntax error at {tmp_path / 'broken.py'}:1" in message


def test_a_malformed_reference_names_the_expected_form(tmp_path: Path) -> None:
    message = _error(_app(tmp_path, "generator: gen.py\n"))
    assert 'generator: expected "file.py:function" or "package.module:function"' in message


def test_a_spec_without_the_field_says_so(tmp_path: Path) -> None:
    spec = load_app_spec(_app(tmp_path))
    assert spec.generator is None and spec.drill_model is None
    with pytest.raises(ConfigError, match=r"app 'filed' names no generator: in its spec"):
        spec.app_function("generator")
    with pytest.raises(ConfigError, match=r"names no drill_model: in its spec .*app\.yaml"):
        spec.app_function("drill_model")


def test_a_module_reference_is_imported_as_a_module() -> None:
    spec = AppSpec(application_id="mod", topology="json:loads", generator="json:dumps")
    assert spec.app_function("generator")([1]) == "[1]"


def test_the_schema_describes_both_fields() -> None:
    properties = spec_json_schema()["properties"]
    for field in ("generator", "drill_model"):
        assert "file.py:function" in properties[field]["description"]


@pytest.mark.parametrize("app", ["word_count", "patient_monitoring"])
def test_the_shipped_specs_name_their_generator_and_drill_model(app: str) -> None:
    spec = load_app_spec(spark_app_spec(app))
    folder = spark_app_spec(app).parent
    assert spec.generator == f"{folder / 'generator.py'}:main"
    assert spec.drill_model == f"{folder / 'drill_model.py'}:spark_models"
    assert spec.app_function("generator").__module__.endswith(".generator")
    models = spec.app_function("drill_model")(spec.params)
    assert models and all(m.store for m in models)
