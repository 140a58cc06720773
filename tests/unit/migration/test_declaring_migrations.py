"""A new version's ``migrations:``: per store one "file.py:function" of a kind (``record`` or
``store``), made absolute and checked at load with file:line errors, in the JSON Schema, and
imported like the topology file."""

from __future__ import annotations

from pathlib import Path

import pytest

from statekeeper.app.spec import load_app_spec, spec_json_schema
from statekeeper.errors import ConfigError

MIGRATIONS = """
def counts_v2(key, value):
    return key, {"count": value}


def rekey(items):
    for key, value in items:
        yield key.upper(), value
"""


def _spec(folder: Path, migrations: str, suffix: str = ".yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "topology.py").write_text("def build():\n    return {}\n")
    (folder / "migrations.py").write_text(MIGRATIONS)
    spec = folder / f"v2{suffix}"
    if suffix == ".toml":
        spec.write_text(f'application_id = "wc-v2"\ntopology = "topology.py:build"\n{migrations}')
    else:
        spec.write_text(f"application_id: wc-v2\ntopology: topology.py:build\n{migrations}")
    return spec


def test_both_kinds_load_with_absolute_files_and_import(tmp_path) -> None:
    spec = load_app_spec(
        _spec(
            tmp_path / "app",
            "migrations:\n  counts: {record: migrations.py:counts_v2}\n"
            "  words:\n    store: migrations.py:rekey\n",
        )
    )
    counts, words = spec.migrations["counts"], spec.migrations["words"]
    assert (counts.kind, words.kind) == ("record", "store")
    assert counts.ref == f"{(tmp_path / 'app' / 'migrations.py').resolve()}:counts_v2"
    assert spec.migration_function("counts")("a", 3) == ("a", {"count": 3})
    assert list(spec.migration_function("words")([("a", 1)])) == [("A", 1)]
    with pytest.raises(ConfigError, match="declares no migration of store lengths"):
        spec.migration_function("lengths")


def test_toml_spec(tmp_path) -> None:
    spec = load_app_spec(
        _spec(tmp_path, '[migrations.counts]\nrecord = "migrations.py:counts_v2"\n', ".toml")
    )
    assert spec.migrations["counts"].kind == "record"


def test_no_migrations_is_the_default(tmp_path) -> None:
    assert load_app_spec(_spec(tmp_path, "")).migrations == {}


@pytest.mark.parametrize(
    ("migrations", "message"),
    [
        (
            "migrations:\n  counts: {record: migrations.py:nope}\n",
            r"migrations\.counts\.record: \S+migrations\.py defines no function 'nope' at "
            r"\S+v2\.yaml:4",
        ),
        (
            "migrations:\n  counts: {store: other.py:rekey}\n",
            r"migrations\.counts\.store: no file \S+other\.py at \S+v2\.yaml:4",
        ),
        (
            "migrations:\n  counts: {}\n",
            r"migrations\.counts: give exactly one of record: or store: .* at \S+v2\.yaml:4",
        ),
        (
            "migrations:\n  counts:\n    record: migrations.py:counts_v2\n"
            "    store: migrations.py:rekey\n",
            r"migrations\.counts: give exactly one of record: or store:",
        ),
        (
            "migrations:\n  counts: {record: not-a-ref}\n",
            r'migrations\.counts\.record: expected "file\.py:function" or '
            r'"package\.module:function" .* at \S+v2\.yaml:4',
        ),
        (
            "migrations:\n  counts: {recrod: migrations.py:counts_v2}\n",
            r"migrations\.counts\.recrod: unknown field \(did you mean record\?\) at \S+v2\.yaml:4",
        ),
    ],
)
def test_load_errors_name_the_field_and_line(tmp_path, migrations, message) -> None:
    with pytest.raises(ConfigError, match=message):
        load_app_spec(_spec(tmp_path, migrations))


def test_the_schema_describes_migrations() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = spec_json_schema()
    assert "migrations" in schema["properties"]
    base = {"application_id": "a", "topology": "t.py:f"}
    jsonschema.validate({**base, "migrations": {"c": {"record": "m.py:f"}}}, schema)
    jsonschema.validate({**base, "migrations": {"c": {"store": "pkg.mod:f"}}}, schema)
    for bad in ({"c": {}}, {"c": {"record": "m.py:f", "store": "m.py:g"}}, {"c": {"x": 1}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({**base, "migrations": bad}, schema)
