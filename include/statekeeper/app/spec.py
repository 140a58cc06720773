"""App specs: the YAML/TOML file a stateful app is launched with.

```yaml
application_id: word-count
topology: topology.py:build_topology       # "file.py:function" (relative to the spec) or
                                           # "package.module:function" -> Topology
params: {input_topic: lines}               # keyword arguments of that function
settings: {max_records_per_batch: 100000}  # StatekeeperSettings fields
spark: {conf: {spark.sql.shuffle.partitions: "4"}}
enabled: true                              # false: the statekeeper_apps DAG keeps it stopped
supervision: {stall_timeout_s: 300}        # its health thresholds (SupervisionConfig fields)
generator: generator.py:main               # optional: main(argv) -> exit code, for
                                           # `statekeeper generate --app`
drill_model: drill_model.py:spark_models   # optional: spark_models(params), for `drill --spark`
migrations:                                # optional, per store of this version: how
  counts: {record: migrations.py:counts_v2}  # `statekeeper upgrade migrate` turns the old
                                           # version's state into this one's
outputs:                                   # optional, per output topic (the topology param
  output_topic: {store: counts}            # naming it): how `statekeeper upgrade diff`
                                           # compares it with the old version's
```
Precedence: defaults < spec file < ``STATEKEEPER_*`` environment variables < overrides
(``--set``). The whole spec is validated at load; a problem names the field and the line.
``statekeeper spec schema`` prints its JSON Schema.

The files the spec names are loaded by :mod:`statekeeper.app.app_files`; specs are found by
:mod:`statekeeper.app.spec_discovery`; file lines for messages come from
:mod:`statekeeper.app.spec_lines`.
"""

from __future__ import annotations

import importlib
import os
import tomllib
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from statekeeper.app.app_files import (
    absolute_ref,
    function_file_problems,
    import_app_file,
    import_topology_file,
)
from statekeeper.app.spec_discovery import SPEC_SUFFIXES
from statekeeper.app.spec_lines import SpecSource, toml_lines, yaml_lines
from statekeeper.app.supervision_config import SupervisionConfig
from statekeeper.errors import ConfigError
from statekeeper.settings import SourceOf, StatekeeperSettings, describe_error, settings_from

#: What ``topology:``, ``generator:`` and ``drill_model:`` hold: "file.py:function" (relative
#: to the spec) or "package.module:function".
FUNCTION_REF = r"^([A-Za-z_][\w.]*|[^:]+\.py):[A-Za-z_]\w*$"
#: The spec's fields naming a function of the app besides its topology (optional).
APP_FUNCTIONS = ("generator", "drill_model")


def _spark_value(value: Any) -> Any:
    """A Spark conf value as the string Spark expects: ``true``/``false`` for booleans,
    numbers as written; anything else is left for the str check to reject."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return value


SparkConfValue = Annotated[
    str,
    BeforeValidator(_spark_value),
    WithJsonSchema({"type": ["string", "integer", "number", "boolean"]}),
]


def _supervision_schema() -> dict[str, Any]:
    schema = SupervisionConfig.model_json_schema()
    return {
        "type": "object",
        "description": "Supervision thresholds of this app (all optional; the defaults apply)",
        "properties": {
            name: {k: v for k, v in prop.items() if k != "title"}
            for name, prop in schema["properties"].items()
        },
        "additionalProperties": False,
    }


class SparkSpec(BaseModel):
    """Spark session options for the app (spark-submit flags win over these)."""

    model_config = ConfigDict(extra="forbid")

    conf: dict[str, SparkConfValue] = Field(
        default_factory=dict,
        description="Spark conf (spark.* keys); numbers and booleans are passed as strings",
    )


#: The kinds of a store's migration: per record, or the whole store at once.
MIGRATION_KINDS = ("record", "store")


class StoreMigrationSpec(BaseModel):
    """How one store's old state becomes this version's: exactly one of ``record``
    (``migrate(key, value) -> (key, value) | None``, None drops the key) or ``store``
    (``migrate_store(items) -> items``, for re-keying or merging), each a
    "file.py:function" (relative to the spec) or "package.module:function"."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"oneOf": [{"required": ["record"]}, {"required": ["store"]}]},
    )

    record: str | None = Field(
        None,
        pattern=FUNCTION_REF,
        description="migrate(key, value) -> (key, value) | None: called per old entry, decoded "
        "with the old serdes; None drops the key",
    )
    store: str | None = Field(
        None,
        pattern=FUNCTION_REF,
        description="migrate_store(items) -> items: called once per task with the old "
        "entries, an iterable of (key, value); returns the new ones",
    )
    compare: str | None = Field(
        None,
        pattern=FUNCTION_REF,
        description="expected(key, migrated, new) -> bool: whether a difference between the "
        "old version's value, migrated, and this version's is expected (`statekeeper upgrade "
        "diff` of a shadow run; None stands for an absent key)",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> StoreMigrationSpec:
        if (self.record is None) == (self.store is None):
            raise ValueError("give exactly one of record: or store:")
        return self

    @property
    def kind(self) -> Literal["record", "store"]:
        """``record`` or ``store``."""
        return "record" if self.record is not None else "store"

    @property
    def ref(self) -> str:
        """The function's reference."""
        return str(self.record if self.record is not None else self.store)


class OutputCompareSpec(BaseModel):
    """How ``statekeeper upgrade diff`` compares one output topic of this version with the
    old version's (docs/changing-apps.md#a-shadow-run-and-its-diff): the latest value per
    key on each side; ``store``: its values are that store's values (the store's migration
    turns an old value into the expected new one, and its ``migrations.<store>.compare``
    decides expected differences); ``compare``: ``expected(key, old, new) -> bool`` (``old``
    migrated when ``store`` is given) says which other differences are expected; ``from``:
    the old spec's param (or topic) when it is not named as here."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    store: str | None = Field(
        None,
        description="the store whose values this topic carries: its migration and compare "
        "apply to the topic's values",
    )
    compare: str | None = Field(
        None,
        pattern=FUNCTION_REF,
        description="expected(key, old, new) -> bool: whether a difference between the old "
        "version's latest value (migrated, with store:) and this version's is expected "
        "(None stands for a tombstone or an absent key)",
    )
    from_: str | None = Field(
        None,
        alias="from",
        description="the old version's topology param (or topic) naming its counterpart "
        "(default: the same name as here)",
    )


class AppSpec(BaseModel):
    """What to run: the topology factory, its parameters, settings and Spark options."""

    model_config = ConfigDict(extra="forbid")

    application_id: str = Field(
        pattern=r"^[A-Za-z0-9._-]+$", description="The app's id (topic and state names)"
    )
    topology: str = Field(
        pattern=FUNCTION_REF,
        description='"file.py:function" (relative to the spec) or "package.module:function", '
        "returning the Topology",
    )
    params: dict[str, Any] = Field(
        default_factory=dict, description="Keyword arguments of the topology function"
    )
    settings: Annotated[
        dict[str, Any],
        WithJsonSchema(
            {
                "type": "object",
                "description": "StatekeeperSettings fields (STATEKEEPER_* env vars win)",
                "properties": {
                    name: {k: v for k, v in prop.items() if k != "title"}
                    for name, prop in StatekeeperSettings.model_json_schema()["properties"].items()
                    if name != "application_id"
                },
                "additionalProperties": False,
            }
        ),
    ] = Field(default_factory=dict)
    spark: SparkSpec = Field(default_factory=SparkSpec)
    #: Desired state for the supervising DAG (statekeeper_apps): run it, or keep it stopped.
    enabled: bool = Field(True, description="false: the statekeeper_apps DAG keeps the app stopped")
    #: Supervision thresholds of this app (SupervisionConfig fields), validated at load.
    supervision: Annotated[dict[str, Any], WithJsonSchema(_supervision_schema())] = Field(
        default_factory=dict
    )
    generator: str | None = Field(
        None,
        pattern=FUNCTION_REF,
        description='"file.py:function" (relative to the spec) or "package.module:function": '
        "the app's input generator, main(argv) -> exit code, which `statekeeper generate "
        "--app` runs with its options",
    )
    drill_model: str | None = Field(
        None,
        pattern=FUNCTION_REF,
        description='"file.py:function" (relative to the spec) or "package.module:function": '
        "spark_models(params) -> the PySpark recomputations `statekeeper drill --spark` "
        "compares the restored stores with",
    )

    migrations: dict[str, StoreMigrationSpec] = Field(
        default_factory=dict,
        description="Per store of this version: how `statekeeper upgrade migrate` turns the "
        "old version's state into this one's (docs/changing-apps.md#migrating-state)",
    )
    outputs: dict[str, OutputCompareSpec] = Field(
        default_factory=dict,
        description="Per output topic of this version, named by the topology param that "
        "names it (or the topic itself): how `statekeeper upgrade diff` compares it with the "
        "old version's (docs/changing-apps.md#a-shadow-run-and-its-diff)",
    )

    _source: SpecSource | None = PrivateAttr(default=None)

    @property
    def spec_path(self) -> Path | None:
        """The file the spec was loaded from (None for a spec built in code)."""
        return self._source.path if self._source is not None else None

    def where(self, *key: str) -> str:
        """Where ``key`` is set in the spec file (``at file:line``), or ``""``."""
        return self._source.where(*key) if self._source is not None else ""

    def resolved_settings(self, **overrides: Any) -> StatekeeperSettings:
        """Settings = defaults < spec < env < ``overrides`` (e.g. CLI flags)."""
        return self.settings_with(overrides)

    def settings_with(
        self, overrides: Mapping[str, Any], override_source: SourceOf | None = None
    ) -> StatekeeperSettings:
        """Settings = defaults < spec < env < ``overrides``; a bad value names its source: the
        spec's line, the environment variable, or ``override_source(field)`` (e.g. ``--set``)."""
        from_spec = {
            key: value
            for key, value in self.settings.items()
            if f"STATEKEEPER_{key.upper()}" not in os.environ
        }
        from_spec.setdefault("application_id", self.application_id)
        values = {**from_spec, **overrides}

        def source_of(field: str) -> tuple[str, str] | None:
            if field in overrides:
                given = override_source(field) if override_source is not None else None
                return given or (field, "(an override)")
            if field in self.settings:
                return f"settings.{field}", self.where("settings", field)
            if field == "application_id":
                return "application_id", self.where("application_id")
            return None

        return settings_from(values, source_of)

    def _named(self, field: str) -> str:
        """``<field> '<value>' (at file:line)``, for messages."""
        where = self.where(field)
        return f"{field} {getattr(self, field)!r}" + (f" ({where})" if where else "")

    def _function(self, field: str, import_file: Callable[[Path], ModuleType]) -> Any:
        """The function ``field`` names, its file imported with ``import_file``."""
        return _import_function(str(getattr(self, field)), self._named(field), import_file)

    def migration_function(self, store: str) -> Any:
        """The function ``migrations.<store>`` names, imported like the topology file (its
        code pickled by value, so Spark executors run it without importing the file)."""
        declared = self.migrations.get(store)
        if declared is None:
            raise ConfigError(f"app {self.application_id!r} declares no migration of store {store}")
        where = self.where("migrations", store, declared.kind)
        named = f"migrations.{store}.{declared.kind} {declared.ref!r}" + (
            f" ({where})" if where else ""
        )
        return _import_function(declared.ref, named, import_topology_file)

    def compare_function(self, store: str) -> Any:
        """The function ``migrations.<store>.compare`` names (None when there is none)."""
        declared = self.migrations.get(store)
        if declared is None or declared.compare is None:
            return None
        where = self.where("migrations", store, "compare")
        named = f"migrations.{store}.compare {declared.compare!r}" + (
            f" ({where})" if where else ""
        )
        return _import_function(declared.compare, named, import_topology_file)

    def output_compare_function(self, name: str) -> Any:
        """The function ``outputs.<name>.compare`` names (None when there is none)."""
        declared = self.outputs.get(name)
        if declared is None or declared.compare is None:
            return None
        where = self.where("outputs", name, "compare")
        named = f"outputs.{name}.compare {declared.compare!r}" + (f" ({where})" if where else "")
        return _import_function(declared.compare, named, import_topology_file)

    def app_function(self, field: str) -> Any:
        """The function the spec's ``generator:`` or ``drill_model:`` names, imported (a file:
        by :func:`import_app_file`, as a module of its folder; sys.path is left alone). A spec
        that names none raises one ConfigError saying so."""
        if field not in APP_FUNCTIONS:
            raise ValueError(f"not one of {APP_FUNCTIONS}: {field!r}")
        if getattr(self, field) is None:
            spec = f" ({self.spec_path})" if self.spec_path is not None else ""
            raise ConfigError(f"app {self.application_id!r} names no {field}: in its spec{spec}")
        return self._function(field, import_app_file)

    def build_topology(self) -> Any:
        """Import ``module:function`` and call it with ``params``; returns the Topology."""
        func_name = self.topology.rpartition(":")[2]
        named = self._named("topology")
        factory = self._function("topology", import_topology_file)
        try:
            built = factory(**self.params)
        except ConfigError:
            raise
        except TypeError as exc:
            raise ConfigError(f"app spec {named} rejected params {self.params}: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - the factory's own code failed
            raise ConfigError(f"{named}: {func_name}() raised {_raised(exc)}") from exc
        if built is None:
            raise ConfigError(
                f"{named}: {func_name}() returned None, not a Topology (a missing `return`?)"
            )
        return built


def _import_function(ref: str, named: str, import_file: Callable[[Path], ModuleType]) -> Any:
    """The function ``ref`` ("file.py:function" or "module:function") names, its file
    imported with ``import_file``; ``named`` says which field, for messages."""
    module_name, _, func_name = ref.rpartition(":")
    try:
        if module_name.endswith(".py"):
            module = import_file(Path(module_name))
        else:
            module = importlib.import_module(module_name)
    except SyntaxError as exc:
        raise ConfigError(
            f"{named}: syntax error at {exc.filename}:{exc.lineno}: {exc.msg}"
        ) from exc
    except (ImportError, OSError) as exc:
        raise ConfigError(f"app spec {named}: cannot import: {exc}") from exc
    except Exception as exc:  # noqa: BLE001 - the module's own code failed at import
        raise ConfigError(f"{named}: importing it raised {_raised(exc)}") from exc
    function = getattr(module, func_name, None)
    if not callable(function):
        raise ConfigError(f"app spec {named}: no function {func_name!r}")
    return function


def spec_json_schema() -> dict[str, Any]:
    """The JSON Schema of an app spec file (``statekeeper spec schema``), for editors."""
    schema = AppSpec.model_json_schema()
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "statekeeper app spec",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def _raised(exc: BaseException) -> str:
    """``Type: message at file:line`` of the innermost frame an exception came from."""
    frames = traceback.extract_tb(exc.__traceback__)
    at = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{at}"


def load_app_spec(path: str | Path) -> AppSpec:
    """Read and validate a ``.yaml``/``.yml`` or ``.toml`` app spec: every field, the
    ``supervision:`` thresholds and the settings. A problem raises one ConfigError naming the
    field, the file and line, and the close names of an unknown field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read app spec {path}: {exc.strerror or exc}") from exc
    if path.suffix not in SPEC_SUFFIXES:
        raise ConfigError(f"app spec {path}: use a .yaml, .yml or .toml file")
    try:
        if path.suffix == ".toml":
            raw, lines = tomllib.loads(text), toml_lines(text)
        else:
            raw, lines = yaml.safe_load(text), yaml_lines(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f" at {path}:{mark.line + 1}" if mark is not None else f" in {path}"
        raise ConfigError(f"app spec {path} is not valid yaml: {exc.problem}{at}") from exc
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"app spec {path} is not valid {path.suffix[1:]}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"app spec {path}: expected a mapping at the top level")
    source = SpecSource(path, lines)
    raw["topology"] = absolute_ref(path, raw.get("topology"))
    for field in APP_FUNCTIONS:
        if field in raw:
            raw[field] = absolute_ref(path, raw[field])
    _absolute_migration_refs(path, raw)
    try:
        spec = AppSpec(**raw)
    except ValidationError as exc:
        raise ConfigError(f"invalid app spec: {_spec_problems(exc, source, raw)}") from exc
    spec._source = source
    refs: dict[str, str | None] = {field: getattr(spec, field) for field in APP_FUNCTIONS}
    wheres = {field: source.where(field) for field in APP_FUNCTIONS}
    for store, declared in spec.migrations.items():
        field = f"migrations.{store}.{declared.kind}"
        refs[field], wheres[field] = declared.ref, source.where("migrations", store, declared.kind)
        if declared.compare is not None:
            field = f"migrations.{store}.compare"
            refs[field] = declared.compare
            wheres[field] = source.where("migrations", store, "compare")
    for name, output in spec.outputs.items():
        if output.compare is not None:
            field = f"outputs.{name}.compare"
            refs[field], wheres[field] = output.compare, source.where("outputs", name, "compare")
    problems = function_file_problems(refs, wheres.__getitem__) + _supervision_problems(
        spec.supervision, source
    )
    try:  # the settings too, so a typo fails before Spark starts
        spec.resolved_settings()
    except ConfigError as exc:
        if not problems:
            raise
        problems.append(str(exc))
    if problems:
        raise ConfigError(f"invalid app spec: {'; '.join(problems)}")
    return spec


def _absolute_migration_refs(path: Path, raw: dict[str, Any]) -> None:
    """``migrations.<store>.record|store|compare`` and ``outputs.<name>.compare`` with their
    files made absolute (in place)."""
    for section, kinds in (
        ("migrations", (*MIGRATION_KINDS, "compare")),
        ("outputs", ("compare",)),
    ):
        declared_all = raw.get(section)
        if not isinstance(declared_all, dict):
            continue
        for declared in declared_all.values():
            if isinstance(declared, dict):
                for kind in kinds:
                    if kind in declared:
                        declared[kind] = absolute_ref(path, declared[kind])


def _known_fields(loc: tuple[Any, ...]) -> list[str]:
    """The field names a model has at ``loc`` (for the close names of an unknown field)."""
    if loc[:1] == ("spark",) and len(loc) <= 2:
        return list(SparkSpec.model_fields)
    if loc[:1] == ("migrations",) and len(loc) == 3:
        return list(StoreMigrationSpec.model_fields)
    if loc[:1] == ("outputs",) and len(loc) == 3:
        return ["store", "compare", "from"]
    if len(loc) <= 1:
        return list(AppSpec.model_fields)
    return []


def _spec_problems(exc: ValidationError, source: SpecSource, raw: Mapping[str, Any]) -> str:
    problems = []
    for err in exc.errors():
        loc = tuple(str(p) for p in err["loc"])
        name = ".".join(loc) or "spec"
        migration_ref = len(loc) == 3 and (
            (loc[0] == "migrations" and loc[2] in (*MIGRATION_KINDS, "compare"))
            or (loc[0] == "outputs" and loc[2] == "compare")
        )
        if err["type"] == "string_pattern_mismatch" and (
            migration_ref or loc in (("topology",), *((field,) for field in APP_FUNCTIONS))
        ):
            err = {**err, "msg": 'expected "file.py:function" or "package.module:function"'}
        problems.append(describe_error(err, name, source.where(*loc), _known_fields(loc)))
    return "; ".join(problems)


def _supervision_problems(supervision: Mapping[str, Any], source: SpecSource) -> list[str]:
    """The spec's ``supervision:`` thresholds: known fields, valid values, consistent."""
    known = SupervisionConfig.model_fields
    problems = [
        describe_error(
            {"type": "extra_forbidden"},
            f"supervision.{key}",
            source.where("supervision", key),
            known,
        )
        for key in supervision
        if key not in known
    ]
    if not problems:
        try:
            SupervisionConfig(**supervision)
        except ValidationError as exc:
            for err in exc.errors():
                loc = ("supervision", *(str(p) for p in err["loc"]))
                problems.append(describe_error(err, ".".join(loc), source.where(*loc)))
    return problems
